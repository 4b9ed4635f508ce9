-- Operator reads (SPEC §13): the credential sources of the Namespace with id $1, disabled ones
-- included (backend references only; the worker never holds a value).
SELECT coalesce(jsonb_agg(occ.credential_source_json(c) ORDER BY c.id), '[]')
FROM occ.credential_sources c
WHERE c.namespace_id = $1
