-- SPEC §13 (Admission and CLI), E15, E19's admission side: a deployment names credential
-- sources (a `model_key` harness source and `tool` sources), snapshotted into its revision;
-- an operator's withdrawal request writes a `pending` row per runtime holder that admitted the
-- source and enqueues its work; operators read the rows.

-- V4's guard of a revision insert, with the Secret-source check of a harness auth left to the
-- two methods that name one (the `credential_source` method's shape is the CHECK's).
CREATE OR REPLACE FUNCTION occ.agent_revision_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    a occ.agents;
    expected integer;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (to_jsonb(NEW) - 'retired_at') IS DISTINCT FROM (to_jsonb(OLD) - 'retired_at')
           OR (OLD.retired_at IS NOT NULL AND NEW.retired_at IS DISTINCT FROM OLD.retired_at) THEN
            RAISE EXCEPTION 'agent revision % is immutable', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    SELECT * INTO a FROM occ.agents WHERE namespace_id = NEW.namespace_id AND id = NEW.agent_id FOR UPDATE;
    IF a.id IS NULL THEN
        RAISE EXCEPTION 'agent %/% does not exist', NEW.namespace_id, NEW.agent_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT coalesce(max(revision), 0) + 1 INTO expected FROM occ.agent_revisions WHERE agent_id = NEW.agent_id;
    IF NEW.revision <> expected THEN
        RAISE EXCEPTION 'revision number must be % for agent %', expected, NEW.agent_id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.service_principal_id <> a.service_principal_id THEN
        RAISE EXCEPTION 'revision must name the service principal of agent %', a.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(NEW.plugins) p
               WHERE jsonb_typeof(p) <> 'object' OR jsonb_typeof(p->'id') IS DISTINCT FROM 'string'
                  OR NOT occ.is_ident(p->>'id')) THEN
        RAISE EXCEPTION 'plugins must be [{"id": identifier}]' USING ERRCODE = 'check_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_each(NEW.secret_bindings) b
               WHERE b.key !~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$' OR jsonb_typeof(b.value) <> 'object'
                  OR jsonb_typeof(b.value->'namespaceId') IS DISTINCT FROM 'string'
                  OR jsonb_typeof(b.value->'id') IS DISTINCT FROM 'string') THEN
        RAISE EXCEPTION 'secret bindings must be {"ENV": {"namespaceId", "id"}}' USING ERRCODE = 'check_violation';
    END IF;
    -- A `credential_source` harness auth names no Secret source; its shape is
    -- agent_revisions_harness_auth_check's.
    IF NEW.harness_auth IS NOT NULL
       AND NEW.harness_auth->>'method' IS DISTINCT FROM 'credential_source' AND (
        jsonb_typeof(NEW.harness_auth->'source'->'namespaceId') IS DISTINCT FROM 'string'
        OR jsonb_typeof(NEW.harness_auth->'source'->'id') IS DISTINCT FROM 'string') THEN
        RAISE EXCEPTION 'harness auth source must name a namespaceId and id' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $_$;

-- One source a deployment names, checked and snapshotted (SPEC §13, 5399-5412): it exists,
-- the actor may `operate` it, it has the kind its flag asks for, it is `ready`, and the
-- selected Credential Gateway owns it (no Credential Proxy is built in). The row stays
-- share-locked to the end of the transaction, so a concurrent disable waits for the revision.
-- Messages name the source `ID in Namespace NS`, never `NS/ID`, which the CLI reads as an Agent.
CREATE FUNCTION occ.credential_source_admit(p_namespace text, p_actor text, p_id text,
    p_kind text, p_gateway text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    c occ.credential_sources;
BEGIN
    SELECT * INTO c FROM occ.credential_sources
    WHERE namespace_id = p_namespace AND id = p_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'credential source % in Namespace % does not exist', p_id, p_namespace
            USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.agent_require(p_actor, 'operate', 'credential_source', p_id, p_namespace);
    IF c.kind <> p_kind THEN
        RAISE EXCEPTION 'credential source % in Namespace % is a % source, not a % source (%)', p_id,
            p_namespace, c.kind, p_kind,
            CASE p_kind WHEN 'model_key' THEN '--credential-source names the harness model key'
                        ELSE '--tool-source names a tool credential' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.state <> 'ready' THEN
        RAISE EXCEPTION 'credential source % in Namespace % is % (by % at %); it attaches to no new revision',
            p_id, p_namespace, c.state, c.disabled_by,
            to_char(c.disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF c.owner <> 'credential_gateway' THEN
        RAISE EXCEPTION 'credential source % in Namespace % is owned by Credential Proxy %, and no Credential Proxy is built in',
            p_id, p_namespace, c.driver_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF c.driver_id <> p_gateway THEN
        RAISE EXCEPTION 'credential source % in Namespace % belongs to Credential Gateway %, not the selected %',
            p_id, p_namespace, c.driver_id, p_gateway
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN jsonb_build_object('sourceId', c.id, 'credentialGatewayId', p_gateway,
        'kind', c.kind, 'driverId', c.driver_id, 'backendRef', c.backend_ref)
        || CASE WHEN c.egress IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('egress', c.egress) END;
END $$;

-- The snapshot of a deployment's sources (SPEC §13): the harness source first, then each tool
-- source in the given order, with distinct ids and distinct `OCC_CREDENTIAL_<ID>` names.
CREATE FUNCTION occ.credential_sources_admit(p_namespace text, p_actor text,
    p_harness_source text, p_tool_sources text[], p_gateway text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    tools text[] := coalesce(p_tool_sources, '{}');
    snapshot jsonb := '[]'::jsonb;
    dup text;
    t text;
BEGIN
    IF p_harness_source IS NULL AND cardinality(tools) = 0 THEN
        RETURN snapshot;
    END IF;
    IF p_gateway IS NULL OR length(btrim(p_gateway)) = 0 THEN
        RAISE EXCEPTION 'credential sources need a selected Credential Gateway, and none is selected (credentialGateway in the OCC_INSTALLATION_CONFIG file)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT x INTO dup FROM unnest(tools || p_harness_source) x
    WHERE x IS NOT NULL GROUP BY x HAVING count(*) > 1 ORDER BY x LIMIT 1;
    IF dup IS NOT NULL THEN
        RAISE EXCEPTION 'credential source % is named more than once', dup
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT 'OCC_CREDENTIAL_' || upper(replace(x, '-', '_')) INTO dup FROM unnest(tools) x
    GROUP BY upper(replace(x, '-', '_')) HAVING count(*) > 1 ORDER BY 1 LIMIT 1;
    IF dup IS NOT NULL THEN
        RAISE EXCEPTION 'tool sources % share the environment name %',
            (SELECT string_agg(x, ' and ' ORDER BY x) FROM unnest(tools) x
             WHERE 'OCC_CREDENTIAL_' || upper(replace(x, '-', '_')) = dup), dup
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_harness_source IS NOT NULL THEN
        snapshot := snapshot || jsonb_build_array(occ.credential_source_admit(
            p_namespace, p_actor, p_harness_source, 'model_key', p_gateway));
    END IF;
    FOREACH t IN ARRAY tools LOOP
        snapshot := snapshot || jsonb_build_array(occ.credential_source_admit(
            p_namespace, p_actor, t, 'tool', p_gateway));
    END LOOP;
    RETURN snapshot;
END $$;

DROP FUNCTION occ.agent_deploy(text, text, text, text, text, text, text, text, text, jsonb, jsonb, text, text, text, jsonb);

-- V20's body, with a third harness auth, `credential_source` (exactly one of the three), tool
-- sources, and the selected Credential Gateway's id (the CLI reads it from the Installation
-- configuration file).
CREATE FUNCTION occ.agent_deploy(p_namespace text, p_agent text, p_actor text, p_configuration text, p_harness text, p_mode text, p_harness_secret text, p_compute_id text, p_compute_implementation text, p_secret_bindings jsonb DEFAULT '{}'::jsonb, p_plugins jsonb DEFAULT '[]'::jsonb, p_harness_version text DEFAULT NULL::text, p_service_account text DEFAULT NULL::text, p_sandbox_driver_id text DEFAULT NULL::text, p_sandbox_facets jsonb DEFAULT NULL::jsonb, p_credential_source text DEFAULT NULL::text, p_tool_sources text[] DEFAULT '{}'::text[], p_credential_gateway_id text DEFAULT NULL::text) RETURNS jsonb
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
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    a := occ.agent_lock(p_namespace, p_agent);
    PERFORM occ.agent_require(p_actor, 'deploy', 'agent', a.id, p_namespace);
    PERFORM occ.agent_require(p_actor, 'read', 'configuration', p_configuration, p_namespace);
    SELECT * INTO c FROM occ.configurations WHERE namespace_id = p_namespace AND id = p_configuration;
    IF c.id IS NULL THEN
        RAISE EXCEPTION 'configuration %/% does not exist', p_namespace, p_configuration
            USING ERRCODE = 'no_data_found';
    END IF;
    IF num_nonnulls(p_harness_secret, p_service_account, p_credential_source) <> 1 THEN
        RAISE EXCEPTION 'a deployment needs exactly one harness auth: a harness Secret, a service account or a credential source'
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
        sandbox_driver_id, sandbox_facets, credential_sources)
    VALUES (rev_id, p_namespace, a.id, rev_no, p_actor, a.service_principal_id, c.id,
        c.generation, c.document, p_harness, approved,
        p_mode, p_mode, p_compute_id, p_compute_implementation,
        auth, coalesce(p_secret_bindings, '{}'), coalesce(p_plugins, '[]'), backend,
        p_sandbox_driver_id, facets, sources);
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
                    (SELECT jsonb_agg(s->'sourceId') FROM jsonb_array_elements(sources) s)) END);
    RETURN jsonb_build_object('agentId', a.id, 'revisionId', rev_id, 'revision', rev_no,
        'work', work_key, 'sandboxDriverId', p_sandbox_driver_id, 'sandboxFacets', facets,
        'credentialSources', sources);
END $$;

-- SPEC E15: an operator's request to withdraw one source from the Agent's runtimes. Under
-- Namespace → Agent → row locks: the actor needs `operate` on the Agent; each runtime holder
-- (E14) whose snapshot admitted the source gets a `pending` row, or its pending row is taken
-- over (`requested_by`, `requested_at`); a `revoked` row stays revoked and gets no work. Each
-- revision with a pending row and no outstanding withdrawal work gets one, with a fresh key,
-- so a request starts a fresh chain. A deleting Agent, an unknown source or no holder that
-- admitted it is an admission error, and nothing is written.
CREATE FUNCTION occ.credential_withdrawal_request(p_actor text, p_namespace text,
    p_agent text, p_source text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    a occ.agents;
    revs text[];
    pending text[];
    works text[] := '{}';
    r text;
    k text;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    PERFORM 1 FROM occ.namespaces_all WHERE id = p_namespace FOR SHARE;
    a := occ.agent_lock(p_namespace, p_agent);
    PERFORM occ.agent_require(p_actor, 'operate', 'agent', a.id, p_namespace);
    IF NOT EXISTS (SELECT 1 FROM occ.credential_sources
                   WHERE namespace_id = p_namespace AND id = p_source) THEN
        RAISE EXCEPTION 'credential source % in Namespace % does not exist', p_source, p_namespace
            USING ERRCODE = 'no_data_found';
    END IF;
    SELECT array_agg(rv.id ORDER BY rv.revision) INTO revs
    FROM occ.agent_revisions rv
    WHERE rv.id IN (SELECT occ.runtime_holders(a.id))
      AND rv.credential_sources @> jsonb_build_array(jsonb_build_object('sourceId', p_source));
    IF revs IS NULL THEN
        RAISE EXCEPTION 'no revision of agent %/% that may hold a runtime admitted credential source %',
            p_namespace, a.id, p_source
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    PERFORM 1 FROM occ.credential_withdrawals
    WHERE namespace_id = p_namespace AND source_id = p_source AND revision_id = ANY (revs)
    ORDER BY revision_id FOR UPDATE;
    INSERT INTO occ.credential_withdrawals (namespace_id, agent_id, revision_id, source_id,
                                            requested_by)
    SELECT p_namespace, a.id, x, p_source, p_actor FROM unnest(revs) x
    ON CONFLICT (namespace_id, revision_id, source_id) DO UPDATE
        SET requested_by = EXCLUDED.requested_by, requested_at = EXCLUDED.requested_at
        WHERE occ.credential_withdrawals.state = 'pending';
    SELECT array_agg(w.revision_id ORDER BY x.n) INTO pending
    FROM unnest(revs) WITH ORDINALITY x (id, n)
    JOIN occ.credential_withdrawals w
      ON w.namespace_id = p_namespace AND w.revision_id = x.id AND w.source_id = p_source
    WHERE w.state = 'pending';
    FOREACH r IN ARRAY coalesce(pending, '{}') LOOP
        IF NOT occ.credential_withdrawal_outstanding(a.id, r) THEN
            k := occ.credential_withdrawal_enqueue(p_namespace, a.id, r, p_actor, NULL, 0);
            works := works || k;
        END IF;
    END LOOP;
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.credentials_withdraw.admit',
        'agent', a.id,
        jsonb_build_object('sourceId', p_source, 'revisionIds', to_jsonb(revs),
                           'works', to_jsonb(works)));
    RETURN jsonb_build_object('agentId', a.id, 'sourceId', p_source,
        'revisions', to_jsonb(revs), 'works', to_jsonb(works));
END $$;

-- A withdrawal row as the operator reads it (camelCase keys; timestamps in UTC).
CREATE FUNCTION occ.credential_withdrawal_json(w occ.credential_withdrawals) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_build_object(
        'namespaceId', w.namespace_id, 'agentId', w.agent_id, 'revisionId', w.revision_id,
        'sourceId', w.source_id, 'state', w.state, 'requestedBy', w.requested_by,
        'requestedAt', to_char(w.requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'lastReason', w.last_reason,
        'lastAt', to_char(w.last_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'revokedAt', to_char(w.revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
