-- The operator's queue listing, newest first. $1 state, $2 Namespace id, $3 operation,
-- $4 Agent id or name, $5 created at or after this RFC 3339 time, $6 created within this
-- interval of the database clock, $7 id below (the cursor of the page before), $8 limit;
-- each filter but the limit is nullable. A claimed work names its holder and since when (V27).
SELECT id, idempotency_key, operation, namespace_id, agent_id, revision_id, actor_id, state,
       attempt_count, reason_code, result_data,
       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at,
       to_char(available_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS available_at,
       to_char(completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS completed_at,
       claim_worker::text, claim_host, claim_pid,
       to_char(claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS claimed_at
FROM occ.work_status
WHERE ($1::text IS NULL OR state = $1)
  AND ($2::text IS NULL OR namespace_id = $2)
  AND ($3::text IS NULL OR operation = $3)
  AND ($4::text IS NULL OR agent_id = $4
       OR agent_id IN (SELECT id FROM occ.agents WHERE name = $4))
  AND ($5::text IS NULL OR created_at >= $5::text::timestamptz)
  AND ($6::text IS NULL OR created_at >= clock_timestamp() - $6::text::interval)
  AND ($7::bigint IS NULL OR id < $7)
ORDER BY id DESC
LIMIT $8
