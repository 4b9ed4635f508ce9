-- Claims up to $2 works in one statement, each the head of a distinct free lane, oldest due
-- first (Q4; fair across lanes). Only lane heads are read (`occ.work_lanes`, kept by the
-- V11/V14 trigger), and claimable now is the index range `head_at <= statement_timestamp()`,
-- so neither the backlog behind a busy lane's head nor future-dated work is read. The claim
-- is written on the lane row only (V14): one set of claim columns per lane, so PostgreSQL
-- cannot hold two live claims in one lane; the work row is not written. A lane row another
-- transaction holds is skipped. The claim names its holder, the claiming worker process, in the
-- same UPDATE (V27).
-- $1 lease in milliseconds, $2 at most this many works, $3 the worker's id, $4 its host, $5 its
-- pid.
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
    SELECT heads.lane, heads.head_at, h.id, h.attempt_count, h.idempotency_key, h.operation,
           h.namespace_id, h.agent_id, h.revision_id, h.namespace_target, h.agent_target,
           h.actor_id, h.created_at
    FROM heads
    -- One probe of the work's key per lane head, whatever the planner estimates of `heads`
    -- (its LIMIT is a parameter): the LIMIT 1 keeps the lookup from being joined otherwise,
    -- which for a small queue was a scan of every work.
    CROSS JOIN LATERAL (
        SELECT w.* FROM occ.work w
        WHERE w.id = heads.head_id AND w.state = 'queued'
          -- The schema keeps timestamps finite (V7); a row forced past it is skipped, never
          -- fatal.
          AND isfinite(w.created_at) AND w.attempt_count < 2147483647
        LIMIT 1
    ) h
    ORDER BY heads.head_at, h.id
    LIMIT $2::bigint
), claimed AS (
    UPDATE occ.work_lanes l
    SET claim_id = e.id,
        claim_token = gen_random_uuid(),
        claimed_at = clock_timestamp(),
        renewed_at = clock_timestamp(),
        lease_expires_at = clock_timestamp() + make_interval(secs => $1::bigint / 1000.0),
        claim_attempt = e.attempt_count + 1,
        claim_worker = $3::text::uuid,
        claim_host = $4::text,
        claim_pid = $5::integer
    FROM eligible e
    WHERE l.lane = e.lane
    -- The work's columns come from the join above: the work row is read once.
    RETURNING e.id, l.claim_token::text AS token, e.idempotency_key, e.operation,
              e.namespace_id, e.agent_id, e.revision_id, e.namespace_target, e.agent_target,
              e.actor_id, l.claim_attempt AS attempt_count,
              (extract(epoch FROM clock_timestamp() - e.created_at) * 1000)::bigint AS age_ms,
              e.lane, e.head_at
)
SELECT id, token, idempotency_key, operation, namespace_id, agent_id, revision_id,
       namespace_target, agent_target, actor_id, attempt_count, age_ms, lane
FROM claimed
ORDER BY head_at, id
