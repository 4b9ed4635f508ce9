-- The managed account a harness auth names, as it is now (SPEC M2): its credential and its
-- backend binding `{backendId, driverId, workspaceId, credentialIssued}`, NULL when unbound.
-- $1 namespace id, $2 id.
SELECT a.credential,
       CASE WHEN b.account_id IS NOT NULL THEN jsonb_build_object(
           'backendId', b.backend_id, 'driverId', b.driver_id, 'workspaceId', b.workspace_id,
           'credentialIssued', b.credential_issued) END AS backend_binding
FROM occ.service_accounts a
LEFT JOIN occ.service_account_bindings b ON b.namespace_id = a.namespace_id AND b.account_id = a.id
WHERE a.namespace_id = $1 AND a.id = $2
