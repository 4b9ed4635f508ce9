-- SPEC §13 (Data; Admission and CLI): credential sources, the Namespace-owned references to a
-- model key or a tool credential that a Credential Gateway or Proxy attaches to an Agent's
-- runtime. A source is disabled, never deleted. `credential_source` becomes an IAM resource kind
-- in roles, bindings, restrictions, audits and grant scopes; `agent-operator` covers it.

CREATE TABLE occ.credential_sources (
    namespace_id  text NOT NULL CHECK (occ.is_ident(namespace_id)) REFERENCES occ.namespaces_all (id),
    id            text NOT NULL CHECK (occ.is_ident(id)),
    kind          text NOT NULL CHECK (kind IN ('model_key', 'tool')),
    owner         text NOT NULL CHECK (owner IN ('credential_gateway', 'credential_proxy')),
    driver_id     text NOT NULL CHECK (length(btrim(driver_id)) > 0 AND length(driver_id) <= 128),
    state         text NOT NULL DEFAULT 'ready' CHECK (state IN ('ready', 'disabled')),
    -- A Kubernetes Secret reference (NAMESPACE/NAME/KEY), never a value.
    backend_ref   text NOT NULL
        CHECK (backend_ref ~ '^[a-z0-9][-a-z0-9]*/[a-z0-9][-a-z0-9.]*/[-._a-zA-Z0-9]+$'),
    egress        jsonb NULL
        CHECK (egress IS NULL OR coalesce(
            jsonb_typeof(egress) = 'object'
            AND egress - 'provider' - 'backend' = '{}'::jsonb
            AND jsonb_typeof(egress -> 'provider') = 'string'
            AND jsonb_typeof(egress -> 'backend') = 'string'
            AND length(btrim(egress ->> 'provider')) > 0
            AND length(btrim(egress ->> 'backend')) > 0, false)),
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    disabled_at   timestamptz NULL,
    disabled_by   text NULL,
    PRIMARY KEY (namespace_id, id),
    CONSTRAINT credential_sources_disabled_check
        CHECK ((state = 'disabled') = (disabled_at IS NOT NULL AND disabled_by IS NOT NULL)
               AND (disabled_at IS NULL) = (disabled_by IS NULL))
);

ALTER TABLE occ.iam_roles DROP CONSTRAINT iam_roles_resource_kinds_check;
ALTER TABLE occ.iam_roles ADD CONSTRAINT iam_roles_resource_kinds_check
    CHECK (cardinality(resource_kinds) > 0
        AND resource_kinds <@ ARRAY['installation', 'namespace', 'agent', 'configuration', 'secret',
                                    'service_account', 'credential_source']);
ALTER TABLE occ.iam_bindings DROP CONSTRAINT iam_bindings_resource_kind_check;
ALTER TABLE occ.iam_bindings ADD CONSTRAINT iam_bindings_resource_kind_check
    CHECK (resource_kind IN ('agent', 'configuration', 'secret', 'service_account', 'credential_source'));
ALTER TABLE occ.iam_restrictions DROP CONSTRAINT iam_restrictions_resource_kind_check;
ALTER TABLE occ.iam_restrictions ADD CONSTRAINT iam_restrictions_resource_kind_check
    CHECK (resource_kind IN ('namespace', 'agent', 'configuration', 'secret', 'service_account',
                             'credential_source'));
ALTER TABLE occ.audit_events DROP CONSTRAINT audit_events_resource_kind_check;
ALTER TABLE occ.audit_events ADD CONSTRAINT audit_events_resource_kind_check
    CHECK (resource_kind IN ('installation', 'namespace', 'agent', 'agent_revision', 'configuration',
                             'secret', 'service_account', 'identity', 'iam_binding', 'iam_group',
                             'work', 'credential_source'));

-- SPEC section 1: every built-in role covers credential sources; `agent-operator` with its
-- `operate`, `deploy` and `read`.
UPDATE occ.iam_roles SET resource_kinds = resource_kinds || 'credential_source'::text
WHERE builtin AND id IN ('installation-admin', 'namespace-admin', 'agent-operator', 'viewer')
  AND NOT 'credential_source' = ANY (resource_kinds);

CREATE OR REPLACE FUNCTION occ.parse_scope(p_scope text, OUT scope_kind text, OUT namespace_id text,
    OUT resource_kind text, OUT resource_id text) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $_$
DECLARE
    m text[];
BEGIN
    IF p_scope = 'installation' THEN
        scope_kind := 'installation';
        RETURN;
    END IF;
    m := regexp_match(p_scope, '^(namespace|agent|secret|service_account|credential_source):([^/]+)(?:/(.+))?$');
    IF m IS NULL OR (m[1] = 'namespace') <> (m[3] IS NULL) THEN
        RAISE EXCEPTION 'invalid scope %: installation, namespace:NS, agent:NS/AGENT, secret:NS/ID, service_account:NS/ID or credential_source:NS/ID',
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
    ELSIF m[1] = 'credential_source' THEN
        SELECT c.id INTO resource_id FROM occ.credential_sources c
        WHERE c.namespace_id = parse_scope.namespace_id AND c.id = m[3];
    ELSE
        SELECT s.id INTO resource_id FROM occ.service_accounts s
        WHERE s.namespace_id = parse_scope.namespace_id AND s.id = m[3];
    END IF;
    IF resource_id IS NULL THEN
        RAISE EXCEPTION 'no % % in Namespace %', m[1], m[3], m[2] USING ERRCODE = 'no_data_found';
    END IF;
END $_$;

-- A source as the operator reads it (camelCase keys; timestamps in UTC).
CREATE FUNCTION occ.credential_source_json(c occ.credential_sources) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_build_object(
        'namespaceId', c.namespace_id, 'id', c.id, 'kind', c.kind, 'owner', c.owner,
        'driverId', c.driver_id, 'state', c.state, 'backendRef', c.backend_ref, 'egress', c.egress,
        'createdBy', c.created_by,
        'createdAt', to_char(c.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'disabledBy', c.disabled_by,
        'disabledAt', to_char(c.disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));

-- `create` on the source; the CLI passes the selected owner's id as p_driver_id.
CREATE FUNCTION occ.credential_source_create(p_namespace text, p_id text, p_kind text,
    p_backend_ref text, p_owner text, p_driver_id text, p_egress jsonb, p_actor text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    c occ.credential_sources;
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    PERFORM occ.agent_require(p_actor, 'create', 'credential_source', p_id, p_namespace);
    INSERT INTO occ.credential_sources (namespace_id, id, kind, owner, driver_id, backend_ref,
                                        egress, created_by)
    VALUES (p_namespace, p_id, p_kind, coalesce(p_owner, 'credential_gateway'), p_driver_id,
            p_backend_ref, p_egress, p_actor)
    RETURNING * INTO c;
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.credential_sources.create',
        'credential_source', p_id,
        jsonb_build_object('kind', c.kind, 'owner', c.owner, 'driverId', c.driver_id,
                           'backendRef', c.backend_ref, 'egress', c.egress));
    RETURN occ.credential_source_json(c);
END $$;

-- `administer` on the source. Disabling stops new attachments and detaches nothing; the row stays.
CREATE FUNCTION occ.credential_source_disable(p_namespace text, p_id text, p_actor text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    c occ.credential_sources;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    SELECT * INTO c FROM occ.credential_sources
    WHERE namespace_id = p_namespace AND id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'credential source %/% does not exist', p_namespace, p_id
            USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.agent_require(p_actor, 'administer', 'credential_source', p_id, p_namespace);
    IF c.state = 'disabled' THEN
        RAISE EXCEPTION 'credential source %/% is already disabled (by % at %)', p_namespace, p_id,
            c.disabled_by, to_char(c.disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE occ.credential_sources SET state = 'disabled', disabled_at = clock_timestamp(),
        disabled_by = p_actor
    WHERE namespace_id = p_namespace AND id = p_id
    RETURNING * INTO c;
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.credential_sources.disable',
        'credential_source', p_id, '{}');
    RETURN occ.credential_source_json(c);
END $$;
