-- Enqueues one work row, claimable after $8 milliseconds by the database clock (0: at once);
-- an existing idempotency key changes nothing (Q3).
-- $1 key, $2 namespace_id, $3 agent_id, $4 revision_id, $5 namespace_target, $6 agent_target,
-- $7 actor_id, $8 delay ms. Returns the row id and whether this call inserted it.
WITH inserted AS (
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id,
                          namespace_target, agent_target, actor_id, available_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7,
            clock_timestamp() + make_interval(secs => $8::bigint / 1000.0))
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
)
SELECT id, true AS inserted FROM inserted
UNION ALL
SELECT id, false FROM occ.work WHERE idempotency_key = $1 AND NOT EXISTS (SELECT 1 FROM inserted)
