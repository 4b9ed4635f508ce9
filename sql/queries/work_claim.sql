-- Claims up to $2 works in one statement, each the head of a distinct free lane, oldest due
-- first (Q4; fair across lanes). Only lane heads are read (`occ.work_lanes`, kept by the
-- V11/V14 trigger), and claimable now is the index range `head_at <= statement_timestamp()`,
-- so neither the backlog behind a busy lane's head nor future-dated work is read. The claim
-- is written on the lane row only (V14): one set of claim columns per lane, so PostgreSQL
-- cannot hold two live claims in one lane; the work row is not written. A lane row another
-- transaction holds is skipped.
-- $1 lease in milliseconds, $2 at most this many works.
WITH heads AS (
    -- Lane rows only, in the index's order: the plan cannot depend on how the planner
    -- estimates a join. Up to eight more than asked, so a few rows forced past the schema's
    -- checks at the front of the queue are passed over, never claimed and never blocking.
    SELECT l.lane, l.head_id, l.head_at
    FROM occ.work_lanes l
    WHERE l.head_id IS NOT NULL AND l.claim_id IS NULL AND l.head_at <= statement_timestamp()
    ORDER BY l.head_at, l.head_id
    LIMIT $2::bigint + 8
    FOR NO KEY UPDATE SKIP LOCKED
), eligible AS (
    SELECT heads.lane, h.id, h.attempt_count
    FROM heads
    JOIN occ.work h ON h.id = heads.head_id
    WHERE h.state = 'queued'
      -- The schema keeps timestamps finite (V7); a row forced past it is skipped, never fatal.
      AND isfinite(h.created_at) AND h.attempt_count < 2147483647
    ORDER BY heads.head_at, heads.head_id
    LIMIT $2::bigint
), claimed AS (
    UPDATE occ.work_lanes l
    SET claim_id = e.id,
        claim_token = gen_random_uuid(),
        claimed_at = clock_timestamp(),
        renewed_at = clock_timestamp(),
        lease_expires_at = clock_timestamp() + make_interval(secs => $1::bigint / 1000.0),
        claim_attempt = e.attempt_count + 1
    FROM eligible e
    WHERE l.lane = e.lane
    RETURNING l.claim_id, l.claim_token, l.claim_attempt
)
SELECT w.id, c.claim_token::text AS token, w.idempotency_key, w.operation, w.namespace_id,
       w.agent_id, w.revision_id, w.namespace_target, w.agent_target, w.actor_id,
       c.claim_attempt AS attempt_count,
       (extract(epoch FROM clock_timestamp() - w.created_at) * 1000)::bigint AS age_ms, w.lane
FROM claimed c
JOIN occ.work w ON w.id = c.claim_id
ORDER BY w.available_at, w.id
