-- Operator reads: the Configurations of the Namespace with id $1, without their documents.
SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', c.id, 'generation', c.generation, 'updatedBy', c.updated_by,
        'updatedAt', to_char(c.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
    ORDER BY c.id), '[]')
FROM occ.configurations c
WHERE c.namespace_id = $1
