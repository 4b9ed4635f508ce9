-- Operator reads (SPEC G1): an Agent's outstanding repository cleanup, oldest first: each
-- work's key, revision, kind, state, the code of its latest attempt (none before its first
-- pass), its attempt count and when it may run next. $1 Namespace id, $2 Agent id.
SELECT coalesce(jsonb_agg(jsonb_build_object(
           'work', w.idempotency_key, 'revisionId', w.revision_id,
           'kind', split_part(w.idempotency_key, ':', 4), 'state', w.state,
           'code', (SELECT a.code FROM occ.work_attempts a WHERE a.work_id = w.id
                    ORDER BY a.id DESC LIMIT 1),
           'attempt', w.attempt_count,
           'nextAttemptAt', to_char(w.available_at AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
           ORDER BY w.id), '[]'::jsonb)
FROM occ.work_status w
WHERE w.namespace_id = $1 AND w.agent_id = $2 AND w.agent_target = 'repository_cleanup'
  AND w.state IN ('queued', 'claimed')
