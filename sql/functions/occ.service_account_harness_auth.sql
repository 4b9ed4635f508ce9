-- The frozen harness auth of a managed account at admission (M1), or an exception naming why
-- it cannot be admitted: the actor may `read` it, it is issued (an access-token credential)
-- and its binding is valid for its backend, a configured `chatgpt` backend.
CREATE OR REPLACE FUNCTION occ.service_account_harness_auth(p_namespace text, p_id text, p_actor text)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    v jsonb;
BEGIN
    PERFORM occ.agent_require(p_actor, 'read', 'service_account', p_id, p_namespace);
    v := occ.service_account_json(p_namespace, p_id);
    IF v IS NULL THEN
        RAISE EXCEPTION 'service account %/% does not exist', p_namespace, p_id
            USING ERRCODE = 'no_data_found';
    END IF;
    IF v->'credential' = 'null'::jsonb THEN
        RAISE EXCEPTION 'service account %/% is not issued (no access token)', p_namespace, p_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF v->'backendBinding' = 'null'::jsonb
       OR NOT (v->'backendBinding'->>'credentialIssued')::boolean
       OR NOT EXISTS (SELECT 1 FROM occ.backends
                      WHERE id = v->'backendBinding'->>'backendId' AND type = 'chatgpt') THEN
        RAISE EXCEPTION 'service account %/% has no valid backend binding (bind it to a configured chatgpt backend)',
            p_namespace, p_id USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN jsonb_build_object('method', 'service_account',
        'source', jsonb_build_object('namespaceId', p_namespace, 'id', p_id),
        'credential', v->'credential', 'backendBinding', v->'backendBinding');
END $$;
