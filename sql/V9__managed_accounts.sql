-- Managed ChatGPT account harness auth (SPEC §10, M1-M4; seed 004 5057-5130, 5395-5396).
-- Forward-only; never edit once landed.
--
-- The backend catalog is a table, not worker configuration: admission (`occ.agent_deploy`, the
-- contract any API server calls) must decide "binding valid for the revision's backend" with
-- the same catalog the worker re-checks on every pass, and only PostgreSQL is shared by both.
-- The seed's start-up validation of its backend definitions (1247-1248) is these constraints:
-- no malformed backend can be stored, so none can reach a worker.
--
-- A service account's credential is the seed's `{kind: access_token, secretRef: {name, key}}`
-- (5103-5110): the name and key of a Kubernetes Secret in the Agent's namespace, never a value.
-- Its backend binding `{backendId, driverId, workspaceId, credentialIssued}` (5096-5102,
-- 5116-5123) is a row of its own, since an account can be issued and not yet bound.

-- Installation backends (`admin backend add|remove|list`). `chatgpt` is the one type a managed
-- account binds to; the worker still compares the type, so a later type never passes silently.
CREATE TABLE occ.backends (
    id          text CHECK (occ.is_ident(id)) PRIMARY KEY,
    type        text NOT NULL CHECK (type IN ('chatgpt')),
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp() CHECK (isfinite(created_at))
);

-- A Kubernetes Secret name (DNS subdomain) and data key, as the `secrets` backend reference
-- spells them.
CREATE FUNCTION occ.is_secret_name(value text) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN value ~ '^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$';
CREATE FUNCTION occ.is_secret_key(value text) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN value ~ '^[-._a-zA-Z0-9]{1,253}$';

-- Exactly `{"kind": "access_token", "secretRef": {"name": NAME, "key": KEY}}`.
CREATE FUNCTION occ.is_access_token_credential(c jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN coalesce(CASE WHEN jsonb_typeof(c) = 'object' AND jsonb_typeof(c->'secretRef') = 'object' THEN
        (c - 'kind'::text - 'secretRef'::text) = '{}'::jsonb
        AND c->'kind' = '"access_token"'::jsonb
        AND ((c->'secretRef') - 'name'::text - 'key'::text) = '{}'::jsonb
        AND jsonb_typeof(c->'secretRef'->'name') = 'string'
        AND jsonb_typeof(c->'secretRef'->'key') = 'string'
        AND occ.is_secret_name(c->'secretRef'->>'name')
        AND occ.is_secret_key(c->'secretRef'->>'key')
    ELSE false END, false);

-- A backend binding's driver and workspace ids.
CREATE FUNCTION occ.is_workspace_id(value text) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN value ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$';

-- Exactly `{"backendId", "driverId", "workspaceId", "credentialIssued"}` with their rules.
CREATE FUNCTION occ.is_backend_binding(b jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN coalesce(CASE WHEN jsonb_typeof(b) = 'object' THEN
        (b - 'backendId'::text - 'driverId'::text - 'workspaceId'::text - 'credentialIssued'::text) = '{}'::jsonb
        AND jsonb_typeof(b->'backendId') = 'string' AND occ.is_ident(b->>'backendId')
        AND jsonb_typeof(b->'driverId') = 'string' AND occ.is_ident(b->>'driverId')
        AND jsonb_typeof(b->'workspaceId') = 'string' AND occ.is_workspace_id(b->>'workspaceId')
        AND jsonb_typeof(b->'credentialIssued') = 'boolean'
    ELSE false END, false);

-- The legacy `access_token_ref` as a credential: `NAME/KEY` becomes its secretRef; anything
-- else named no Secret a driver could mount, so the account is left not issued (NULL).
CREATE FUNCTION occ.legacy_access_token_credential(ref text) RETURNS jsonb LANGUAGE sql IMMUTABLE
    RETURN CASE WHEN occ.is_secret_name(split_part(ref, '/', 1))
                 AND occ.is_secret_key(substr(ref, length(split_part(ref, '/', 1)) + 2))
                 AND position('/' IN ref) > 0
        THEN jsonb_build_object('kind', 'access_token', 'secretRef', jsonb_build_object(
            'name', split_part(ref, '/', 1),
            'key', substr(ref, length(split_part(ref, '/', 1)) + 2)))
    END;

-- Service accounts: the credential replaces `access_token_ref`; the binding replaces
-- `backend_id`; the catalog replaces `backend_available`.
ALTER TABLE occ.service_accounts
    ADD COLUMN credential jsonb NULL
        CONSTRAINT service_accounts_credential_check
        CHECK (credential IS NULL OR occ.is_access_token_credential(credential)),
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
        CHECK (isfinite(updated_at));

CREATE TABLE occ.service_account_bindings (
    namespace_id       text NOT NULL,
    account_id         text NOT NULL,
    backend_id         text NOT NULL CHECK (occ.is_ident(backend_id)),
    driver_id          text NOT NULL CHECK (occ.is_ident(driver_id)),
    workspace_id       text NOT NULL CHECK (occ.is_workspace_id(workspace_id)),
    credential_issued  boolean NOT NULL,
    bound_by           text NOT NULL,
    bound_at           timestamptz NOT NULL DEFAULT clock_timestamp() CHECK (isfinite(bound_at)),
    PRIMARY KEY (namespace_id, account_id),
    FOREIGN KEY (namespace_id, account_id) REFERENCES occ.service_accounts (namespace_id, id)
        ON DELETE CASCADE
);

-- Existing rows keep their meaning. A backend that was available to some account becomes a
-- configured `chatgpt` backend (the only kind a managed account ever named), so revisions on
-- it pass the catalog step as before; one that no account could use stays unconfigured, so
-- they keep failing `BACKEND_UNAVAILABLE`. The old rows had no driver or workspace, so no
-- binding can be derived: an account needs `admin service-account bind` before a new
-- deployment can be admitted.
INSERT INTO occ.backends (id, type, created_by)
SELECT DISTINCT backend_id, 'chatgpt', 'migration' FROM occ.service_accounts WHERE backend_available
ON CONFLICT (id) DO NOTHING;
UPDATE occ.service_accounts SET credential = occ.legacy_access_token_credential(access_token_ref);
ALTER TABLE occ.service_accounts
    DROP COLUMN access_token_ref,
    DROP COLUMN backend_id,
    DROP COLUMN backend_available;

-- The revision's backend (seed 5087), and the exact harness auth shape. A `service_account`
-- snapshot is exactly `{method, source, credential, backendBinding}`; admission writes both
-- as verified. A legacy snapshot may hold JSON null in either, which the worker refuses
-- (`HARNESS_AUTH_SOURCE_CHANGED`, `SERVICE_ACCOUNT_BACKEND_MISMATCH`), as the seed does for a
-- credential that is not an access token or a missing admitted binding (5103-5128).
ALTER TABLE occ.agent_revisions
    ADD COLUMN backend_id text NULL
        CONSTRAINT agent_revisions_backend_id_check CHECK (backend_id IS NULL OR occ.is_ident(backend_id));

CREATE FUNCTION occ.is_service_account_harness_auth(a jsonb, p_backend_id text) RETURNS boolean
LANGUAGE sql IMMUTABLE
    RETURN coalesce(CASE WHEN jsonb_typeof(a) = 'object' THEN
        (a - 'method'::text - 'source'::text - 'credential'::text - 'backendBinding'::text) = '{}'::jsonb
        AND a ? 'credential' AND a ? 'backendBinding'
        AND (a->'credential' = 'null'::jsonb OR occ.is_access_token_credential(a->'credential'))
        AND (a->'backendBinding' = 'null'::jsonb OR (occ.is_backend_binding(a->'backendBinding')
             AND p_backend_id IS NOT DISTINCT FROM a->'backendBinding'->>'backendId'))
    ELSE false END, false);

-- Legacy snapshots `{method, source, accessTokenRef, backendId}` become the new shape (the
-- immutability guard is held off for this one rewrite of admitted rows).
ALTER TABLE occ.agent_revisions DROP CONSTRAINT agent_revisions_harness_auth_check;
ALTER TABLE occ.agent_revisions DISABLE TRIGGER agent_revisions_guard;
UPDATE occ.agent_revisions
SET backend_id = CASE WHEN occ.is_ident(harness_auth->>'backendId') THEN harness_auth->>'backendId' END,
    harness_auth = jsonb_build_object(
        'method', 'service_account',
        'source', harness_auth->'source',
        'credential', coalesce(occ.legacy_access_token_credential(harness_auth->>'accessTokenRef'),
                               'null'::jsonb),
        'backendBinding', 'null'::jsonb)
WHERE harness_auth->>'method' = 'service_account';
ALTER TABLE occ.agent_revisions ENABLE TRIGGER agent_revisions_guard;

ALTER TABLE occ.agent_revisions ADD CONSTRAINT agent_revisions_harness_auth_check
    CHECK (harness_auth IS NULL OR coalesce(
        jsonb_typeof(harness_auth) = 'object'
        AND harness_auth->>'method' IN ('secret', 'service_account')
        AND jsonb_typeof(harness_auth->'source') = 'object'
        AND harness_auth->'source'->>'namespaceId' IS NOT NULL
        AND harness_auth->'source'->>'id' IS NOT NULL
        AND (harness_auth->>'method' = 'secret'
             OR occ.is_service_account_harness_auth(harness_auth, backend_id)), false));

-- Backends ------------------------------------------------------------------------------------

-- `admin backend list`: the catalog.
CREATE FUNCTION occ.backend_list() RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'type', type,
               'createdBy', created_by, 'createdAt', created_at) ORDER BY id), '[]')
    FROM occ.backends
$$;

-- `admin backend add`: configures a backend (installation `administer`, audited). Adding an
-- existing backend with the same type changes nothing.
CREATE FUNCTION occ.backend_add(p_actor text, p_id text, p_type text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    existing text;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'configure backends');
    SELECT type INTO existing FROM occ.backends WHERE id = p_id FOR UPDATE;
    IF existing IS NOT NULL AND existing IS DISTINCT FROM p_type THEN
        RAISE EXCEPTION 'backend % already exists with type %', p_id, existing
            USING ERRCODE = 'unique_violation';
    END IF;
    IF existing IS NULL THEN
        INSERT INTO occ.backends (id, type, created_by) VALUES (p_id, p_type, p_actor);
        PERFORM occ.audit_admission(p_actor, 'openclaw.backends.add', 'installation',
            occ.installation_id(), NULL, NULL, jsonb_build_object('backendId', p_id, 'type', p_type));
    END IF;
    RETURN jsonb_build_object('id', p_id, 'type', p_type, 'created', existing IS NULL);
END $$;

-- `admin backend remove`: revisions admitted on it fail `BACKEND_UNAVAILABLE` from their next
-- pass on, and no new deployment binds to it.
CREATE FUNCTION occ.backend_remove(p_actor text, p_id text) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'configure backends');
    DELETE FROM occ.backends WHERE id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'backend % does not exist', p_id USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.audit_admission(p_actor, 'openclaw.backends.remove', 'installation',
        occ.installation_id(), NULL, NULL, jsonb_build_object('backendId', p_id));
    RETURN jsonb_build_object('id', p_id, 'removed', true);
END $$;

-- Service accounts ----------------------------------------------------------------------------

-- One account as operators and admission see it (no value: a secretRef names where it is).
CREATE FUNCTION occ.service_account_json(p_namespace text, p_id text) RETURNS jsonb
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

-- `admin service-account create NS ID --access-token NAME/KEY`: issues the account's
-- access-token credential. A new account needs `create` on it; issuing an existing one again
-- (a rotated Secret) needs `administer`, and refuses the revisions admitted with the old
-- reference from their next pass on (`HARNESS_AUTH_SOURCE_CHANGED`).
CREATE FUNCTION occ.service_account_create(p_namespace text, p_id text, p_access_token text,
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

-- `admin service-account bind NS ID --backend B --driver D --workspace W`: binds an issued
-- account to a configured `chatgpt` backend (`administer` on the account; audited).
CREATE FUNCTION occ.service_account_bind(p_namespace text, p_id text, p_backend text,
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

-- `admin service-account show NS ID`.
CREATE FUNCTION occ.service_account_show(p_namespace text, p_id text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v jsonb;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    v := occ.service_account_json(p_namespace, p_id);
    IF v IS NULL THEN
        RAISE EXCEPTION 'service account %/% does not exist', p_namespace, p_id
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN v;
END $$;

-- `admin service-account list NS`.
CREATE FUNCTION occ.service_account_list(p_namespace text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    RETURN (SELECT coalesce(jsonb_agg(occ.service_account_json(namespace_id, id) ORDER BY id), '[]')
            FROM occ.service_accounts WHERE namespace_id = p_namespace);
END $$;

-- The frozen harness auth of a managed account at admission (M1), or an exception naming why
-- it cannot be admitted: the actor may `read` it, it is issued (an access-token credential)
-- and its binding is valid for its backend, a configured `chatgpt` backend.
CREATE FUNCTION occ.service_account_harness_auth(p_namespace text, p_id text, p_actor text)
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

-- `occ.agent_deploy` gains `p_service_account` (M1). The parameter list changes, so the V6
-- function is dropped (an added parameter would make every existing call ambiguous) and
-- redefined as V6 wrote it, approved-Harness check included, with exactly one harness source:
-- `p_harness_secret` (the `secret` method) or `p_service_account` (a managed account, which
-- freezes its credential, its binding as verified and `backend_id`).
DROP FUNCTION occ.agent_deploy(text, text, text, text, text, text, text, text, text, jsonb, jsonb, text);
CREATE FUNCTION occ.agent_deploy(
    p_namespace text, p_agent text, p_actor text, p_configuration text,
    p_harness text, p_mode text, p_harness_secret text,
    p_compute_id text, p_compute_implementation text,
    p_secret_bindings jsonb DEFAULT '{}', p_plugins jsonb DEFAULT '[]',
    p_harness_version text DEFAULT NULL, p_service_account text DEFAULT NULL
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    a occ.agents;
    c occ.configurations;
    rev_id text := occ.agent_new_id('rev');
    rev_no integer;
    work_key text;
    approved text;
    auth jsonb;
    backend text;
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
    IF (p_harness_secret IS NULL) = (p_service_account IS NULL) THEN
        RAISE EXCEPTION 'a deployment needs exactly one harness auth: a harness Secret or a service account'
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
    ELSE
        auth := occ.service_account_harness_auth(p_namespace, p_service_account, p_actor);
        backend := auth->'backendBinding'->>'backendId';
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
        compute_implementation, harness_auth, secret_bindings, plugins, backend_id)
    VALUES (rev_id, p_namespace, a.id, rev_no, p_actor, a.service_principal_id, c.id,
        c.generation, c.document, p_harness, approved,
        p_mode, p_mode, p_compute_id, p_compute_implementation,
        auth, coalesce(p_secret_bindings, '{}'), coalesce(p_plugins, '[]'), backend);
    UPDATE occ.agents SET desired_runtime_state = 'running', updated_at = clock_timestamp()
    WHERE id = a.id;
    work_key := 'agent_revision:' || rev_id || ':reconcile';
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
    VALUES (work_key, p_namespace, a.id, rev_id, p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.deploy.admit', 'agent_revision', rev_id,
        jsonb_build_object('agentId', a.id, 'revision', rev_no, 'harnessAuth', auth->>'method'));
    RETURN jsonb_build_object('agentId', a.id, 'revisionId', rev_id, 'revision', rev_no,
        'work', work_key);
END $$;

-- Binding scopes gain `service_account:NS/ID` (how `grant list` prints them), so `read` on one
-- account can be granted and revoked (M2 step 1).
CREATE OR REPLACE FUNCTION occ.parse_scope(
    p_scope text,
    OUT scope_kind text, OUT namespace_id text, OUT resource_kind text, OUT resource_id text
) LANGUAGE plpgsql STABLE AS $$
DECLARE
    m text[];
BEGIN
    IF p_scope = 'installation' THEN
        scope_kind := 'installation';
        RETURN;
    END IF;
    m := regexp_match(p_scope, '^(namespace|agent|secret|service_account):([^/]+)(?:/(.+))?$');
    IF m IS NULL OR (m[1] = 'namespace') <> (m[3] IS NULL) THEN
        RAISE EXCEPTION 'invalid scope %: installation, namespace:NS, agent:NS/AGENT, secret:NS/ID or service_account:NS/ID',
            p_scope USING ERRCODE = 'invalid_parameter_value';
    END IF;
    namespace_id := occ.resolve_namespace(m[2]);
    IF m[1] = 'namespace' THEN
        scope_kind := 'namespace';
        RETURN;
    END IF;
    scope_kind := 'resource';
    resource_kind := m[1];
    IF m[1] = 'agent' THEN
        SELECT a.id INTO resource_id FROM occ.agents a
        WHERE a.namespace_id = parse_scope.namespace_id AND (a.id = m[3] OR a.name = m[3])
        ORDER BY a.id = m[3] DESC LIMIT 1;
    ELSIF m[1] = 'secret' THEN
        SELECT s.id INTO resource_id FROM occ.secrets s
        WHERE s.namespace_id = parse_scope.namespace_id AND s.id = m[3];
    ELSE
        SELECT s.id INTO resource_id FROM occ.service_accounts s
        WHERE s.namespace_id = parse_scope.namespace_id AND s.id = m[3];
    END IF;
    IF resource_id IS NULL THEN
        RAISE EXCEPTION 'no % % in Namespace %', m[1], m[3], m[2] USING ERRCODE = 'no_data_found';
    END IF;
END $$;
