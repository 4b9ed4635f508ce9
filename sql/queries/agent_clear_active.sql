-- Compare-and-clear of the active pointer (A1): only if it still names the stopped revision.
-- $1 namespace id, $2 agent id, $3 the revision that was stopped.
UPDATE occ.agents SET active_revision_id = NULL, updated_at = clock_timestamp()
WHERE namespace_id = $1 AND id = $2 AND active_revision_id = $3
