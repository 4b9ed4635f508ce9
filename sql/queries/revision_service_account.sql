-- The managed account a harness auth names. $1 namespace id, $2 id.
SELECT access_token_ref, backend_id, backend_available
FROM occ.service_accounts WHERE namespace_id = $1 AND id = $2
