-- SPEC G15, G19: the execution captured for a revision. $1 revision id.
SELECT execution FROM occ.repository_executions WHERE revision_id = $1
