-- Bodyless deploy (R1): snapshots the Configuration, the Agent's execution mode (`p_mode`, or the
-- Agent's own when NULL; an Agent created with one refuses another) and the pinned Harness, Compute
-- and auth choices into the next revision and enqueues its reconcile work in the same transaction.
-- A deployment makes the Agent's desired runtime state `running` again. Exactly one harness auth:
-- `p_harness_secret` (the `secret` method), `p_service_account` (a managed account, which freezes
-- its credential, its binding as verified and `backend_id`) or `p_credential_source`
-- (`credential_source`), or `p_runtime_auth` (`runtime`, SPEC M5: no Secret and no source), with
-- tool sources, the Sandbox Driver and its facets (SPEC S2), and the selected Credential Gateway's
-- id (the CLI reads it from the Installation configuration file), and repository credentials (SPEC
-- G8, `occ.repository_credentials_admit`) under the selected repository sender's id (read from the
-- same file).
CREATE OR REPLACE FUNCTION occ.agent_deploy(p_namespace text, p_agent text, p_actor text, p_configuration text, p_harness text, p_mode text, p_harness_secret text, p_compute_id text, p_compute_implementation text, p_secret_bindings jsonb DEFAULT '{}'::jsonb, p_plugins jsonb DEFAULT '[]'::jsonb, p_harness_version text DEFAULT NULL::text, p_service_account text DEFAULT NULL::text, p_sandbox_driver_id text DEFAULT NULL::text, p_sandbox_facets jsonb DEFAULT NULL::jsonb, p_credential_source text DEFAULT NULL::text, p_tool_sources text[] DEFAULT '{}'::text[], p_credential_gateway_id text DEFAULT NULL::text, p_runtime_auth boolean DEFAULT false, p_repositories jsonb DEFAULT NULL::jsonb, p_repository_deadline interval DEFAULT NULL::interval, p_standing boolean DEFAULT false, p_repository_sender_id text DEFAULT NULL::text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    a occ.agents;
    c occ.configurations;
    rev_id text := occ.agent_new_id('rev');
    rev_no integer;
    work_key text;
    approved text;
    auth jsonb;
    backend text;
    facets jsonb := coalesce(p_sandbox_facets, '[]'::jsonb);
    missing text;
    sources jsonb;
    repositories jsonb;
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    a := occ.agent_lock(p_namespace, p_agent);
    PERFORM occ.agent_require(p_actor, 'deploy', 'agent', a.id, p_namespace);
    PERFORM occ.agent_require(p_actor, 'read', 'configuration', p_configuration, p_namespace);
    -- SPEC R1: the revision runs in the Agent's explicit execution mode; `p_mode` NULL takes it,
    -- and a different one is refused before anything is written.
    IF a.execution_mode IS NOT NULL AND p_mode IS NOT NULL AND p_mode <> a.execution_mode THEN
        RAISE EXCEPTION 'agent %/% runs in % execution mode (set at its creation), not in % mode',
            p_namespace, a.id, a.execution_mode, p_mode
            USING ERRCODE = 'check_violation';
    END IF;
    p_mode := coalesce(p_mode, a.execution_mode);
    IF p_mode IS NULL THEN
        RAISE EXCEPTION 'agent %/% has no execution mode: a deployment must name its mode (dedicated or embedded)',
            p_namespace, a.id
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT * INTO c FROM occ.configurations WHERE namespace_id = p_namespace AND id = p_configuration;
    IF c.id IS NULL THEN
        RAISE EXCEPTION 'configuration %/% does not exist', p_namespace, p_configuration
            USING ERRCODE = 'no_data_found';
    END IF;
    IF num_nonnulls(p_harness_secret, p_service_account, p_credential_source,
                    nullif(coalesce(p_runtime_auth, false), false)) <> 1 THEN
        RAISE EXCEPTION 'a deployment needs exactly one harness auth: a harness Secret, a service account, a credential source or the runtime''s own'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_harness_secret IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM occ.secrets WHERE namespace_id = p_namespace AND id = p_harness_secret) THEN
            RAISE EXCEPTION 'secret %/% does not exist', p_namespace, p_harness_secret
                USING ERRCODE = 'no_data_found';
        END IF;
        PERFORM occ.agent_require(p_actor, 'operate', 'secret', p_harness_secret, p_namespace);
        auth := jsonb_build_object('method', 'secret',
            'source', jsonb_build_object('namespaceId', p_namespace, 'id', p_harness_secret));
    ELSIF p_service_account IS NOT NULL THEN
        auth := occ.service_account_harness_auth(p_namespace, p_service_account, p_actor);
        backend := auth->'backendBinding'->>'backendId';
    ELSIF p_runtime_auth THEN
        auth := '{"method": "runtime"}'::jsonb;
    ELSE
        auth := jsonb_build_object('method', 'credential_source', 'sourceId', p_credential_source,
            'credentialGatewayId', p_credential_gateway_id);
    END IF;
    -- SPEC §13: the harness source and the tool sources, checked and snapshotted.
    sources := occ.credential_sources_admit(p_namespace, p_actor, p_credential_source,
        p_tool_sources, p_credential_gateway_id);
    -- SPEC S2: the selected Sandbox Driver's facets are pinned; a Configuration requiring one
    -- it does not offer is refused.
    IF jsonb_typeof(facets) <> 'array' OR EXISTS (
        SELECT 1 FROM jsonb_array_elements(facets) f WHERE jsonb_typeof(f) <> 'string') THEN
        RAISE EXCEPTION 'sandbox facets must be a JSON array of strings'
            USING ERRCODE = 'check_violation';
    END IF;
    IF p_sandbox_driver_id IS NULL AND facets <> '[]'::jsonb THEN
        RAISE EXCEPTION 'sandbox facets need a Sandbox Driver id'
            USING ERRCODE = 'check_violation';
    END IF;
    IF jsonb_typeof(c.document->'sandbox'->'requiredFacets') = 'array' THEN
        SELECT string_agg(r, ', ' ORDER BY r) INTO missing
        FROM jsonb_array_elements_text(c.document->'sandbox'->'requiredFacets') r
        WHERE NOT facets ? r;
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'SANDBOX_FACET_UNAVAILABLE: configuration % requires sandbox facets % that %',
                c.id, missing,
                CASE WHEN p_sandbox_driver_id IS NULL THEN 'no Sandbox Driver is selected to offer'
                     ELSE 'Sandbox Driver ' || p_sandbox_driver_id || ' does not offer' END
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'SANDBOX_FACET_UNAVAILABLE';
        END IF;
    END IF;
    -- SPEC G8: the repositories, each granted to the Namespace at its scope, with the Agent's
    -- standing approval of the first or a deadline, under the selected sender.
    repositories := occ.repository_credentials_admit(p_namespace, a.id, p_repositories,
        p_repository_deadline, p_standing, p_repository_sender_id);
    approved := occ.approved_harness_version(p_harness, p_mode);
    IF approved IS NULL THEN
        RAISE EXCEPTION 'harness % is not approved in % mode', p_harness, p_mode
            USING ERRCODE = 'check_violation';
    END IF;
    IF p_harness_version IS NOT NULL AND p_harness_version IS DISTINCT FROM approved THEN
        RAISE EXCEPTION 'harness % % version % is not the approved version %',
            p_harness, p_mode, p_harness_version, approved
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT coalesce(max(revision), 0) + 1 INTO rev_no FROM occ.agent_revisions WHERE agent_id = a.id;
    INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id,
        service_principal_id, configuration_id, configuration_generation, document,
        harness_id, harness_version, harness_mode, execution_mode, compute_id,
        compute_implementation, harness_auth, secret_bindings, plugins, backend_id,
        sandbox_driver_id, sandbox_facets, credential_sources, repository_credentials)
    VALUES (rev_id, p_namespace, a.id, rev_no, p_actor, a.service_principal_id, c.id,
        c.generation, c.document, p_harness, approved,
        p_mode, p_mode, p_compute_id, p_compute_implementation,
        auth, coalesce(p_secret_bindings, '{}'), coalesce(p_plugins, '[]'), backend,
        p_sandbox_driver_id, facets, sources, repositories);
    UPDATE occ.agents SET desired_runtime_state = 'running', updated_at = clock_timestamp()
    WHERE id = a.id;
    work_key := 'agent_revision:' || rev_id || ':reconcile';
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
    VALUES (work_key, p_namespace, a.id, rev_id, p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.deploy.admit', 'agent_revision', rev_id,
        jsonb_build_object('agentId', a.id, 'revision', rev_no, 'harnessAuth', auth->>'method',
            'sandboxDriverId', p_sandbox_driver_id, 'sandboxFacets', facets)
        || CASE WHEN sources = '[]'::jsonb THEN '{}'::jsonb
                ELSE jsonb_build_object('credentialSourceIds',
                    (SELECT jsonb_agg(s->'sourceId') FROM jsonb_array_elements(sources) s)) END
        || CASE WHEN repositories IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('repositoryCredentials', repositories) END);
    RETURN jsonb_build_object('agentId', a.id, 'revisionId', rev_id, 'revision', rev_no,
        'work', work_key, 'executionMode', p_mode, 'sandboxDriverId', p_sandbox_driver_id,
        'sandboxFacets', facets,
        'credentialSources', sources, 'repositoryCredentials', repositories);
END $$;
