-- Claims the oldest available queued row whose lane has no live claim (Q4). The partial
-- unique index work_one_claim_per_lane makes a concurrent claim in the same lane fail with a
-- unique violation instead of succeeding; the caller simply tries again.
-- $1 lease in milliseconds.
WITH candidate AS (
    SELECT w.id
    FROM occ.work w
    WHERE w.state = 'queued'
      AND w.available_at <= clock_timestamp()
      -- The schema keeps timestamps finite (V7); a row forced past it is skipped, never fatal.
      AND isfinite(w.available_at) AND isfinite(w.created_at) AND w.attempt_count < 2147483647
      AND NOT EXISTS (SELECT 1 FROM occ.work c WHERE c.lane = w.lane AND c.state = 'claimed')
    ORDER BY w.available_at, w.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE occ.work w
SET state = 'claimed',
    claim_token = gen_random_uuid(),
    claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => $1::bigint / 1000.0),
    attempt_count = w.attempt_count + 1,
    updated_at = clock_timestamp()
FROM candidate
WHERE w.id = candidate.id
RETURNING w.id, w.claim_token::text, w.idempotency_key, w.operation, w.namespace_id, w.agent_id,
          w.revision_id, w.namespace_target, w.agent_target, w.actor_id, w.attempt_count,
          (extract(epoch FROM clock_timestamp() - w.created_at) * 1000)::bigint AS age_ms, w.lane
