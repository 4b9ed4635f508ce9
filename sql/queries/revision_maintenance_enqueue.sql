-- Enqueues the next maintenance bucket of an active revision (R11), due when the bucket
-- starts by the database clock. An existing key changes nothing (Q3).
-- $1 namespace id, $2 agent id, $3 revision id, $4 actor id, $5 interval ms.
WITH bucket AS (
    SELECT floor(extract(epoch FROM clock_timestamp()) * 1000 / $5::bigint)::bigint + 1 AS n
)
INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id, available_at)
SELECT 'agent_revision:' || $3 || ':maintenance:' || n, $1, $2, $3, $4,
       to_timestamp(n * $5::bigint / 1000.0)
FROM bucket
ON CONFLICT (idempotency_key) DO NOTHING
