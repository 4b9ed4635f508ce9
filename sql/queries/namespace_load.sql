-- The Namespace a lifecycle work names, tombstones included (SPEC N2-N4). $1 namespace id.
SELECT id, name, status, existing_namespace, deleted_at IS NOT NULL AS tombstoned
FROM occ.namespaces_all
WHERE id = $1
