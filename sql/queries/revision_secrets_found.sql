-- How many of the named Secrets exist in the Namespace (R2 secret bindings and harness auth).
-- $1 namespace id, $2 secret ids (text[], distinct).
SELECT count(*) FROM occ.secrets WHERE namespace_id = $1 AND id = ANY ($2::text[])
