-- Claims up to $2 works in one statement, each the head of a distinct free lane, oldest due
-- first (Q4; fair across lanes). Only lane heads are read (`occ.work_lanes`, kept by the
-- V11 trigger), and claimable now is the index range `head_at <= statement_timestamp()`, so
-- neither the backlog behind a busy lane's head nor future-dated work is read. A lane row
-- another transaction holds is skipped; the partial unique index work_one_claim_per_lane
-- still refuses a second live claim in a lane with a unique violation (the caller then
-- tries again).
-- $1 lease in milliseconds, $2 at most this many works.
WITH heads AS (
    SELECT l.head_id
    FROM occ.work_lanes l
    JOIN occ.work h ON h.id = l.head_id
    WHERE l.head_id IS NOT NULL AND NOT l.claimed AND l.head_at <= statement_timestamp()
      -- The schema keeps timestamps finite (V7); a row forced past it is skipped, never fatal.
      AND isfinite(h.created_at) AND h.attempt_count < 2147483647
    ORDER BY l.head_at, l.head_id
    LIMIT $2
    FOR UPDATE OF l SKIP LOCKED
), claimed AS (
    UPDATE occ.work w
    SET state = 'claimed',
        claim_token = gen_random_uuid(),
        claimed_at = clock_timestamp(),
        lease_expires_at = clock_timestamp() + make_interval(secs => $1::bigint / 1000.0),
        attempt_count = w.attempt_count + 1,
        updated_at = clock_timestamp()
    FROM heads
    WHERE w.id = heads.head_id AND w.state = 'queued'
    RETURNING w.id, w.claim_token::text AS token, w.idempotency_key, w.operation, w.namespace_id,
              w.agent_id, w.revision_id, w.namespace_target, w.agent_target, w.actor_id,
              w.attempt_count,
              (extract(epoch FROM clock_timestamp() - w.created_at) * 1000)::bigint AS age_ms,
              w.lane, w.available_at
)
SELECT id, token, idempotency_key, operation, namespace_id, agent_id, revision_id,
       namespace_target, agent_target, actor_id, attempt_count, age_ms, lane
FROM claimed
ORDER BY available_at, id
