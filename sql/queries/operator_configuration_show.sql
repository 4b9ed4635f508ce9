-- Operator reads: one Configuration ($2) of the Namespace with id $1, with its document; NULL
-- when there is none.
SELECT jsonb_build_object(
    'namespaceId', c.namespace_id, 'id', c.id, 'generation', c.generation,
    'updatedBy', c.updated_by,
    'updatedAt', to_char(c.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'document', c.document)
FROM occ.configurations c
WHERE c.namespace_id = $1 AND c.id = $2
