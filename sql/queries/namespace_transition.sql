-- Moves a live Namespace from one status to another, only if it is still in the first.
-- $1 namespace id, $2 expected status, $3 new status.
UPDATE occ.namespaces_all
SET status = $3, updated_at = clock_timestamp()
WHERE id = $1 AND status = $2 AND deleted_at IS NULL
