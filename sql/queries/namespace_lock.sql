-- Inside a finalizing transaction: locks the Namespace row, tombstones included, so its
-- lifecycle state is decided against what is current. $1 namespace id.
SELECT status, deleted_at IS NOT NULL AS tombstoned
FROM occ.namespaces_all
WHERE id = $1
FOR UPDATE
