-- `admin service-account create NS ID --access-token NAME/KEY`: issues the account's
-- access-token credential. A new account needs `create` on it; issuing an existing one again
-- (a rotated Secret) needs `administer`, and refuses the revisions admitted with the old
-- reference from their next pass on (`HARNESS_AUTH_SOURCE_CHANGED`).
CREATE OR REPLACE FUNCTION occ.service_account_create(p_namespace text, p_id text, p_access_token text,
                                           p_actor text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_credential jsonb := occ.legacy_access_token_credential(p_access_token);
    existing boolean;
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    IF v_credential IS NULL THEN
        RAISE EXCEPTION 'invalid --access-token %: must be SECRET_NAME/KEY (a Kubernetes Secret name in the Agent''s namespace, then its key)',
            coalesce(p_access_token, '') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM 1 FROM occ.service_accounts WHERE namespace_id = p_namespace AND id = p_id FOR UPDATE;
    existing := FOUND;
    IF existing THEN
        PERFORM occ.agent_require(p_actor, 'administer', 'service_account', p_id, p_namespace);
        UPDATE occ.service_accounts SET credential = v_credential,
            updated_at = clock_timestamp()
        WHERE namespace_id = p_namespace AND id = p_id;
    ELSE
        PERFORM occ.agent_require(p_actor, 'create', 'service_account', p_id, p_namespace);
        INSERT INTO occ.service_accounts (namespace_id, id, credential)
        VALUES (p_namespace, p_id, v_credential);
    END IF;
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.service_accounts.issue',
        'service_account', p_id, jsonb_build_object('credential', v_credential, 'reissued', existing));
    RETURN occ.service_account_json(p_namespace, p_id);
END $$;
