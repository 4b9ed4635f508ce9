-- One work row by idempotency key, with its attempt evidence and, while it is claimed, the
-- worker process holding it and since when (V27). $1 key.
SELECT w.id, w.idempotency_key, w.operation, w.namespace_id, w.agent_id, w.revision_id,
       w.actor_id, w.state, w.attempt_count, w.reason_code, w.result_data,
       to_char(w.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at,
       to_char(w.available_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS available_at,
       to_char(w.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS completed_at,
       w.claim_worker::text, w.claim_host, w.claim_pid,
       to_char(w.claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS claimed_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                    'attempt', a.attempt, 'code', a.code, 'outcome', a.outcome,
                    'refusal', a.refusal,
                    'at', to_char(a.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
                    -- A pending repository cleanup's cause (SPEC G3), where there is one.
                    || CASE WHEN a.cause IS NULL THEN '{}'::jsonb
                            ELSE jsonb_build_object('cause', a.cause) END
                  ORDER BY a.id)
                 FROM occ.work_attempts a WHERE a.work_id = w.id), '[]'::jsonb) AS attempts
FROM occ.work_status w
WHERE w.idempotency_key = $1
