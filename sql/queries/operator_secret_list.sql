-- Operator reads: the Secret metadata of the Namespace with id $1 (backend references only;
-- the worker never holds a value).
SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', s.id, 'backendRef', s.backend_ref, 'createdBy', s.created_by,
        'createdAt', to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
    ORDER BY s.id), '[]')
FROM occ.secrets s
WHERE s.namespace_id = $1
