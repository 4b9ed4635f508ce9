-- Operator reads: what a Namespace's or an Agent's work waits for right now. The oldest
-- unfinished work of its lane (the one the lane runs next), the code its latest attempt
-- reported, since when that code has been reported without another in between (the work's
-- creation when no attempt has run), its attempt count and when it may run next. No row when
-- nothing is unfinished. $1 Namespace id, $2 Agent id (NULL: the Namespace's own work).
WITH w AS (
    SELECT id, idempotency_key, state, attempt_count, available_at, created_at
    FROM occ.work_status
    WHERE namespace_id = $1 AND agent_id IS NOT DISTINCT FROM $2::text
      AND state IN ('queued', 'claimed')
    ORDER BY id
    LIMIT 1
), latest AS (
    SELECT a.id, a.code FROM occ.work_attempts a JOIN w ON a.work_id = w.id
    ORDER BY a.id DESC
    LIMIT 1
), streak AS (
    SELECT min(a.at) AS since
    FROM occ.work_attempts a JOIN w ON a.work_id = w.id JOIN latest l ON a.code = l.code
    WHERE a.id > coalesce((SELECT max(b.id) FROM occ.work_attempts b, latest l2
                           WHERE b.work_id = (SELECT id FROM w) AND b.code <> l2.code), 0)
)
SELECT jsonb_build_object(
    'work', w.idempotency_key, 'state', w.state, 'code', latest.code,
    'since', to_char(coalesce(streak.since, w.created_at) AT TIME ZONE 'UTC',
                     'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'attempt', w.attempt_count,
    'nextAttemptAt', to_char(w.available_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
FROM w LEFT JOIN latest ON true LEFT JOIN streak ON true
