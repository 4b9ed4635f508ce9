-- `admin service-account bind NS ID --backend B --driver D --workspace W`: binds an issued
-- account to a configured `chatgpt` backend (`administer` on the account; audited).
CREATE OR REPLACE FUNCTION occ.service_account_bind(p_namespace text, p_id text, p_backend text,
                                         p_driver text, p_workspace text, p_actor text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    a occ.service_accounts;
    backend_type text;
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    SELECT * INTO a FROM occ.service_accounts WHERE namespace_id = p_namespace AND id = p_id FOR UPDATE;
    IF a.id IS NULL THEN
        RAISE EXCEPTION 'service account %/% does not exist', p_namespace, p_id
            USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.agent_require(p_actor, 'administer', 'service_account', p_id, p_namespace);
    SELECT type INTO backend_type FROM occ.backends WHERE id = p_backend;
    IF backend_type IS DISTINCT FROM 'chatgpt' THEN
        RAISE EXCEPTION 'backend % is not a configured chatgpt backend (admin backend list)', p_backend
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF a.credential IS NULL THEN
        RAISE EXCEPTION 'service account %/% is not issued: give it an access token first (admin service-account create --access-token)',
            p_namespace, p_id USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    INSERT INTO occ.service_account_bindings (namespace_id, account_id, backend_id, driver_id,
        workspace_id, credential_issued, bound_by)
    VALUES (p_namespace, p_id, p_backend, p_driver, p_workspace, true, p_actor)
    ON CONFLICT (namespace_id, account_id) DO UPDATE
        SET backend_id = EXCLUDED.backend_id, driver_id = EXCLUDED.driver_id,
            workspace_id = EXCLUDED.workspace_id, credential_issued = EXCLUDED.credential_issued,
            bound_by = EXCLUDED.bound_by, bound_at = clock_timestamp();
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.service_accounts.bind',
        'service_account', p_id, jsonb_build_object('backendId', p_backend, 'driverId', p_driver,
            'workspaceId', p_workspace));
    RETURN occ.service_account_json(p_namespace, p_id);
END $$;
