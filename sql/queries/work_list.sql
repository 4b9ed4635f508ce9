-- The operator's queue listing. $1 state filter (nullable), $2 namespace filter (nullable),
-- $3 limit.
SELECT id, idempotency_key, operation, namespace_id, agent_id, revision_id, actor_id, state,
       attempt_count, reason_code, result_data,
       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at,
       to_char(available_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS available_at,
       to_char(completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS completed_at
FROM occ.work_status
WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR namespace_id = $2)
ORDER BY id
LIMIT $3
