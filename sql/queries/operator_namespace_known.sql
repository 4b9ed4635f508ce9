-- Operator reads: the id of any Namespace, live or tombstoned, named by $1 (id first, then the
-- most recent with that name); no row when none ever existed.
SELECT id FROM occ.namespaces_all
WHERE id = $1 OR name = $1
ORDER BY id = $1 DESC, created_at DESC
LIMIT 1
