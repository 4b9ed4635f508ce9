-- SPEC G14: a revision's expiry state, derived rather than stored: `retiring` when a
-- `terminal-runtime` cleanup of it exists; else `expired` when a `standing-withdrawal` cleanup
-- exists or its `deadlineAt` is past on the database clock; else `none`. $1 revision id.
SELECT CASE
    WHEN EXISTS (SELECT 1 FROM occ.work
                 WHERE idempotency_key = 'agent_revision:' || r.id || ':repository_cleanup:terminal-runtime')
        THEN 'retiring'
    WHEN EXISTS (SELECT 1 FROM occ.work
                 WHERE idempotency_key = 'agent_revision:' || r.id || ':repository_cleanup:standing-withdrawal')
        OR (r.repository_credentials ->> 'deadlineAt')::timestamptz <= clock_timestamp()
        THEN 'expired'
    ELSE 'none'
END
FROM occ.agent_revisions r WHERE r.id = $1
