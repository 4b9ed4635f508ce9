-- One account as operators and admission see it (no value: a secretRef names where it is).
CREATE OR REPLACE FUNCTION occ.service_account_json(p_namespace text, p_id text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'namespaceId', a.namespace_id, 'id', a.id, 'credential', a.credential,
        'issued', a.credential IS NOT NULL,
        'backendBinding', CASE WHEN b.account_id IS NOT NULL THEN jsonb_build_object(
            'backendId', b.backend_id, 'driverId', b.driver_id, 'workspaceId', b.workspace_id,
            'credentialIssued', b.credential_issued) END,
        'createdAt', a.created_at, 'updatedAt', a.updated_at)
    FROM occ.service_accounts a
    LEFT JOIN occ.service_account_bindings b
        ON b.namespace_id = a.namespace_id AND b.account_id = a.id
    WHERE a.namespace_id = p_namespace AND a.id = p_id
$$;
