-- Operator reads (SPEC §13): the credential source $2 of the Namespace with id $1, or NULL.
SELECT occ.credential_source_json(c)
FROM occ.credential_sources c
WHERE c.namespace_id = $1 AND c.id = $2
