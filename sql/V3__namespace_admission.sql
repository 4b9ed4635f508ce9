-- Namespace admission (SPEC N1, N4, Q9) and the IAM administration it depends on, as the
-- PostgreSQL functions any API server (and the operator CLI) calls. Forward-only.
--
-- Every admission function authorizes its actor against the current IAM tables with
-- occ.authorized (the same semantics as src/iam.rs: scopes nest installation -> namespace ->
-- exact resource, a role grants its actions on its resource kinds, restrictions deny and win),
-- raises a clear error with a SQLSTATE when it refuses, and writes one `mutation` audit event
-- in the same transaction as its change.
--
-- Namespace ids are generated as `ns-<8 hex>` so a name can be reused after its Namespace is
-- tombstoned; every function taking a Namespace reference accepts the id or the live name.

-- Whether a binding or restriction scope covers the resource (kind, id, namespace).
CREATE FUNCTION occ.scope_covers(
    s_kind text, s_namespace text, s_resource_kind text, s_resource_id text,
    r_kind text, r_id text, r_namespace text
) RETURNS boolean LANGUAGE sql IMMUTABLE
RETURN CASE s_kind
    WHEN 'installation' THEN true
    WHEN 'namespace' THEN r_namespace IS NOT NULL AND r_namespace = s_namespace
    WHEN 'resource' THEN r_namespace IS NOT DISTINCT FROM s_namespace
        AND s_resource_kind = r_kind AND s_resource_id = r_id
    ELSE false
END;

-- The decision of src/iam.rs `Policy::authorize` with its evidence: {allowed, reason,
-- evidence: {identityId, groupIds, bindingIds, roleIds, restrictionIds}}. A binding or
-- restriction naming a group applies to its members; groupIds are the groups a matching
-- binding or restriction named.
CREATE FUNCTION occ.authorize(
    p_principal text, p_action text, p_kind text, p_id text, p_namespace text
) RETURNS jsonb LANGUAGE sql STABLE AS $$
    WITH ident AS (
        SELECT id FROM occ.identities WHERE id = p_principal
    ), groups AS (
        SELECT m.group_id FROM occ.iam_group_members m WHERE m.identity_id = p_principal
    ), bindings AS (
        SELECT b.id, b.role_id, b.group_id
        FROM occ.iam_bindings b JOIN occ.iam_roles r ON r.id = b.role_id
        WHERE EXISTS (SELECT 1 FROM ident)
          AND (b.principal_id = p_principal OR b.group_id IN (SELECT group_id FROM groups))
          AND p_action = ANY (r.actions) AND p_kind = ANY (r.resource_kinds)
          AND occ.scope_covers(b.scope_kind, b.namespace_id, b.resource_kind, b.resource_id,
                               p_kind, p_id, p_namespace)
    ), restrictions AS (
        SELECT x.id, x.group_id
        FROM occ.iam_restrictions x
        WHERE EXISTS (SELECT 1 FROM ident)
          AND ((x.principal_id IS NULL AND x.group_id IS NULL)
               OR x.principal_id = p_principal
               OR x.group_id IN (SELECT group_id FROM groups))
          AND p_action = ANY (x.actions)
          AND occ.scope_covers(x.scope_kind, x.namespace_id, x.resource_kind, x.resource_id,
                               p_kind, p_id, p_namespace)
    )
    SELECT jsonb_build_object(
        'allowed', EXISTS (SELECT 1 FROM ident) AND EXISTS (SELECT 1 FROM bindings)
                   AND NOT EXISTS (SELECT 1 FROM restrictions),
        'reason', CASE
            WHEN NOT EXISTS (SELECT 1 FROM ident) THEN 'NO_IDENTITY'
            WHEN EXISTS (SELECT 1 FROM restrictions) THEN 'RESTRICTED'
            WHEN NOT EXISTS (SELECT 1 FROM bindings) THEN 'NO_MATCHING_BINDING'
            ELSE 'ALLOWED' END,
        'evidence', jsonb_build_object(
            'identityId', (SELECT id FROM ident),
            'groupIds', coalesce((SELECT jsonb_agg(g ORDER BY g) FROM (
                SELECT group_id AS g FROM bindings UNION SELECT group_id FROM restrictions) matched
                WHERE g IS NOT NULL), '[]'::jsonb),
            'bindingIds', coalesce((SELECT jsonb_agg(id ORDER BY id) FROM bindings), '[]'::jsonb),
            'roleIds', coalesce((SELECT jsonb_agg(DISTINCT role_id) FROM bindings), '[]'::jsonb),
            'restrictionIds', coalesce((SELECT jsonb_agg(id ORDER BY id) FROM restrictions), '[]'::jsonb)))
$$;

-- Whether `p_principal` may `p_action` the resource. Restrictions deny; no identity, no access.
CREATE FUNCTION occ.authorized(
    p_principal text, p_action text, p_kind text, p_id text, p_namespace text
) RETURNS boolean LANGUAGE sql STABLE
RETURN (occ.authorize(p_principal, p_action, p_kind, p_id, p_namespace) ->> 'allowed')::boolean;

-- Raises insufficient_privilege unless the actor is allowed.
CREATE FUNCTION occ.require_authorized(
    p_principal text, p_action text, p_kind text, p_id text, p_namespace text, p_what text
) RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    decision jsonb := occ.authorize(p_principal, p_action, p_kind, p_id, p_namespace);
BEGIN
    IF NOT (decision ->> 'allowed')::boolean THEN
        RAISE EXCEPTION '% may not %: % (% on %)', p_principal, p_what, decision ->> 'reason',
            p_action, p_kind || ' ' || p_id || coalesce(' in namespace ' || p_namespace, '')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $$;

CREATE FUNCTION occ.installation_id() RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    inst text;
BEGIN
    SELECT id INTO inst FROM occ.installation;
    IF inst IS NULL THEN
        RAISE EXCEPTION 'no Installation: run occ-worker bootstrap first'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN inst;
END $$;

-- One admission audit event (kind mutation, outcome success).
CREATE FUNCTION occ.audit_admission(
    p_actor text, p_action text, p_resource_kind text, p_resource_id text, p_namespace text,
    p_work_id bigint, p_details jsonb
) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO occ.audit_events (installation_id, namespace_id, kind, actor_id, action,
                                  resource_kind, resource_id, outcome, work_id, details)
    VALUES (occ.installation_id(), p_namespace, 'mutation', p_actor, p_action,
            p_resource_kind, p_resource_id, 'success', p_work_id, coalesce(p_details, '{}'))
    RETURNING id
$$;

-- The id of a live Namespace named by id or name; raises no_data_found otherwise.
CREATE FUNCTION occ.resolve_namespace(p_ref text) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    found text;
BEGIN
    SELECT id INTO found FROM occ.namespaces WHERE id = p_ref;
    IF found IS NULL THEN
        SELECT id INTO found FROM occ.namespaces WHERE name = p_ref;
    END IF;
    IF found IS NULL THEN
        RAISE EXCEPTION 'no Namespace %', p_ref USING ERRCODE = 'no_data_found';
    END IF;
    RETURN found;
END $$;

-- Identities ------------------------------------------------------------------------------

-- Creates a user, or the service principal of an existing Agent (NS and AGENT by id; NS may
-- be the live name). Installation `administer` required.
CREATE FUNCTION occ.identity_create(
    p_actor text, p_id text, p_service_principal boolean DEFAULT false,
    p_namespace text DEFAULT NULL, p_agent text DEFAULT NULL
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    ns text;
    existing text;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'create identities');
    IF NOT occ.is_ident(p_id) THEN
        RAISE EXCEPTION 'invalid identity id %: lowercase letters, digits, - and _', p_id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM occ.identities WHERE id = p_id) THEN
        RAISE EXCEPTION 'identity % already exists', p_id USING ERRCODE = 'unique_violation';
    END IF;
    IF p_service_principal THEN
        IF p_namespace IS NULL OR p_agent IS NULL THEN
            RAISE EXCEPTION 'a service principal needs its Namespace and Agent'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        ns := occ.resolve_namespace(p_namespace);
        IF NOT EXISTS (SELECT 1 FROM occ.agents WHERE namespace_id = ns AND id = p_agent) THEN
            RAISE EXCEPTION 'no Agent % in Namespace %', p_agent, p_namespace
                USING ERRCODE = 'no_data_found';
        END IF;
        SELECT id INTO existing FROM occ.identities
        WHERE kind = 'service_principal' AND namespace_id = ns AND agent_id = p_agent;
        IF existing IS NOT NULL THEN
            RAISE EXCEPTION 'Agent % already has service principal %', p_agent, existing
                USING ERRCODE = 'unique_violation';
        END IF;
        INSERT INTO occ.identities (id, kind, namespace_id, agent_id)
        VALUES (p_id, 'service_principal', ns, p_agent);
    ELSE
        IF p_namespace IS NOT NULL OR p_agent IS NOT NULL THEN
            RAISE EXCEPTION 'a user belongs to no Namespace or Agent (use --service-principal)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        INSERT INTO occ.identities (id, kind) VALUES (p_id, 'user');
    END IF;
    PERFORM occ.audit_admission(p_actor, 'openclaw.identities.create', 'identity', p_id, ns, NULL,
        jsonb_build_object('kind', CASE WHEN p_service_principal THEN 'service_principal' ELSE 'user' END,
                           'agentId', p_agent));
    RETURN (SELECT jsonb_build_object('id', id, 'kind', kind, 'namespaceId', namespace_id,
                                      'agentId', agent_id)
            FROM occ.identities WHERE id = p_id);
END $$;

-- Revokes an identity by removing it; its bindings and restrictions cascade. The last
-- installation administrator cannot be revoked (the installation would become unmanageable).
CREATE FUNCTION occ.identity_revoke(p_actor text, p_id text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    ident occ.identities;
    removed jsonb;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'revoke identities');
    SELECT * INTO ident FROM occ.identities WHERE id = p_id FOR UPDATE;
    IF ident.id IS NULL THEN
        RAISE EXCEPTION 'no identity %', p_id USING ERRCODE = 'no_data_found';
    END IF;
    -- A service principal may be revoked while its Agent exists (SPEC §1): its API keys,
    -- bindings and restrictions cascade with it, and the Agent's next deployment pass fails
    -- INVALID_AGENT_PRINCIPAL (R2).
    PERFORM pg_advisory_xact_lock(hashtext('occ.installation_admins'));
    SELECT jsonb_build_object(
        'bindingIds', coalesce((SELECT jsonb_agg(id ORDER BY id) FROM occ.iam_bindings WHERE principal_id = p_id), '[]'),
        'restrictionIds', coalesce((SELECT jsonb_agg(id ORDER BY id) FROM occ.iam_restrictions WHERE principal_id = p_id), '[]'),
        'apiKeyIds', coalesce((SELECT jsonb_agg(id ORDER BY id) FROM occ.api_keys WHERE service_principal_id = p_id), '[]'))
    INTO removed;
    DELETE FROM occ.identities WHERE id = p_id;
    -- Directly or through a group, someone must still administer the installation; the
    -- exception rolls the deletion back.
    IF NOT occ.installation_administered() THEN
        RAISE EXCEPTION 'identity % is the last installation administrator', p_id
            USING ERRCODE = 'object_in_use';
    END IF;
    PERFORM occ.audit_admission(p_actor, 'openclaw.identities.revoke', 'identity', p_id,
        ident.namespace_id, NULL, jsonb_build_object('kind', ident.kind, 'removed', removed));
    RETURN jsonb_build_object('id', p_id, 'revoked', true, 'removed', removed);
END $$;

-- Role bindings ---------------------------------------------------------------------------

-- Parses installation | namespace:NS | agent:NS/AGENT | secret:NS/ID into a binding scope. NS
-- may be the id or live name; AGENT the Agent's id or name; the target must exist.
CREATE FUNCTION occ.parse_scope(
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
    m := regexp_match(p_scope, '^(namespace|agent|secret):([^/]+)(?:/(.+))?$');
    IF m IS NULL OR (m[1] = 'namespace') <> (m[3] IS NULL) THEN
        RAISE EXCEPTION 'invalid scope %: installation, namespace:NS, agent:NS/AGENT or secret:NS/ID',
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
    ELSE
        SELECT s.id INTO resource_id FROM occ.secrets s
        WHERE s.namespace_id = parse_scope.namespace_id AND s.id = m[3];
    END IF;
    IF resource_id IS NULL THEN
        RAISE EXCEPTION 'no % % in Namespace %', m[1], m[3], m[2] USING ERRCODE = 'no_data_found';
    END IF;
END $$;

-- Parses a binding principal: an identity id, or `group:ID` for a group. Exactly one of the
-- two results is set; the identity or group must exist.
CREATE FUNCTION occ.parse_principal(p_principal text, OUT identity_id text, OUT group_id text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_principal LIKE 'group:%' THEN
        group_id := substr(p_principal, 7);
        IF NOT EXISTS (SELECT 1 FROM occ.iam_groups g WHERE g.id = parse_principal.group_id) THEN
            RAISE EXCEPTION 'no group %', group_id USING ERRCODE = 'no_data_found';
        END IF;
    ELSE
        identity_id := p_principal;
        IF NOT EXISTS (SELECT 1 FROM occ.identities i WHERE i.id = p_principal) THEN
            RAISE EXCEPTION 'no identity %', p_principal USING ERRCODE = 'no_data_found';
        END IF;
    END IF;
END $$;

-- Whether some identity still administers the installation, directly or through a group
-- with at least one member.
CREATE FUNCTION occ.installation_administered() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM occ.iam_bindings b JOIN occ.iam_roles r ON r.id = b.role_id
        WHERE b.scope_kind = 'installation'
          AND 'administer' = ANY (r.actions) AND 'installation' = ANY (r.resource_kinds)
          AND (b.principal_id IS NOT NULL
               OR EXISTS (SELECT 1 FROM occ.iam_group_members m WHERE m.group_id = b.group_id)))
$$;

-- Grants ROLE to PRINCIPAL (an identity, or `group:ID`) on SCOPE (idempotent). Installation
-- `administer` required.
CREATE FUNCTION occ.binding_grant(p_actor text, p_principal text, p_role text, p_scope text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s record;
    who record;
    binding_id bigint;
    inserted boolean := true;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'grant roles');
    SELECT * INTO who FROM occ.parse_principal(p_principal);
    IF NOT EXISTS (SELECT 1 FROM occ.iam_roles WHERE id = p_role) THEN
        RAISE EXCEPTION 'no role %', p_role USING ERRCODE = 'no_data_found';
    END IF;
    SELECT * INTO s FROM occ.parse_scope(p_scope);
    INSERT INTO occ.iam_bindings (principal_id, group_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
    VALUES (who.identity_id, who.group_id, p_role, s.scope_kind, s.namespace_id, s.resource_kind, s.resource_id)
    ON CONFLICT DO NOTHING
    RETURNING id INTO binding_id;
    IF binding_id IS NULL THEN
        inserted := false;
        SELECT b.id INTO binding_id FROM occ.iam_bindings b
        WHERE b.principal_id IS NOT DISTINCT FROM who.identity_id
          AND b.group_id IS NOT DISTINCT FROM who.group_id
          AND b.role_id = p_role AND b.scope_kind = s.scope_kind
          AND b.namespace_id IS NOT DISTINCT FROM s.namespace_id
          AND b.resource_kind IS NOT DISTINCT FROM s.resource_kind
          AND b.resource_id IS NOT DISTINCT FROM s.resource_id;
    ELSE
        PERFORM occ.audit_admission(p_actor, 'openclaw.iam.bindings.grant', 'iam_binding',
            binding_id::text, s.namespace_id, NULL,
            jsonb_build_object('principalId', who.identity_id, 'groupId', who.group_id,
                               'roleId', p_role, 'scope', p_scope));
    END IF;
    RETURN jsonb_build_object('bindingId', binding_id, 'principalId', who.identity_id,
        'groupId', who.group_id, 'roleId', p_role, 'scopeKind', s.scope_kind, 'namespaceId', s.namespace_id,
        'resourceKind', s.resource_kind, 'resourceId', s.resource_id, 'created', inserted);
END $$;

-- Removes the binding of ROLE to PRINCIPAL (an identity, or `group:ID`) on SCOPE.
-- Installation `administer` required; the last installation administrator's binding stays.
CREATE FUNCTION occ.binding_revoke(p_actor text, p_principal text, p_role text, p_scope text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s record;
    who_identity text;
    who_group text;
    binding_id bigint;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'revoke roles');
    IF p_principal LIKE 'group:%' THEN
        who_group := substr(p_principal, 7);
    ELSE
        who_identity := p_principal;
    END IF;
    SELECT * INTO s FROM occ.parse_scope(p_scope);
    PERFORM pg_advisory_xact_lock(hashtext('occ.installation_admins'));
    DELETE FROM occ.iam_bindings b
    WHERE b.principal_id IS NOT DISTINCT FROM who_identity
      AND b.group_id IS NOT DISTINCT FROM who_group
      AND b.role_id = p_role AND b.scope_kind = s.scope_kind
      AND b.namespace_id IS NOT DISTINCT FROM s.namespace_id
      AND b.resource_kind IS NOT DISTINCT FROM s.resource_kind
      AND b.resource_id IS NOT DISTINCT FROM s.resource_id
    RETURNING b.id INTO binding_id;
    IF binding_id IS NULL THEN
        RAISE EXCEPTION 'no binding of % to % on %', p_role, p_principal, p_scope
            USING ERRCODE = 'no_data_found';
    END IF;
    IF NOT occ.installation_administered() THEN
        RAISE EXCEPTION 'the binding is the last installation administrator''s'
            USING ERRCODE = 'object_in_use';
    END IF;
    PERFORM occ.audit_admission(p_actor, 'openclaw.iam.bindings.revoke', 'iam_binding',
        binding_id::text, s.namespace_id, NULL,
        jsonb_build_object('principalId', who_identity, 'groupId', who_group,
                           'roleId', p_role, 'scope', p_scope));
    RETURN jsonb_build_object('bindingId', binding_id, 'principalId', who_identity,
        'groupId', who_group, 'roleId', p_role, 'scope', p_scope, 'revoked', true);
END $$;

-- Groups ----------------------------------------------------------------------------------

-- Creates an empty group. Installation `administer` required.
CREATE FUNCTION occ.group_create(p_actor text, p_id text) RETURNS jsonb
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'create groups');
    IF NOT occ.is_ident(p_id) THEN
        RAISE EXCEPTION 'invalid group id %: lowercase letters, digits, - and _', p_id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO occ.iam_groups (id) VALUES (p_id) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'group % already exists', p_id USING ERRCODE = 'unique_violation';
    END IF;
    PERFORM occ.audit_admission(p_actor, 'openclaw.iam.groups.create', 'iam_group', p_id, NULL,
        NULL, '{}');
    RETURN jsonb_build_object('id', p_id, 'members', '[]'::jsonb);
END $$;

-- Adds IDENTITY to GROUP (idempotent). Installation `administer` required.
CREATE FUNCTION occ.group_add_member(p_actor text, p_group text, p_identity text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    added boolean;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'change group membership');
    IF NOT EXISTS (SELECT 1 FROM occ.iam_groups WHERE id = p_group) THEN
        RAISE EXCEPTION 'no group %', p_group USING ERRCODE = 'no_data_found';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM occ.identities WHERE id = p_identity) THEN
        RAISE EXCEPTION 'no identity %', p_identity USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO occ.iam_group_members (group_id, identity_id) VALUES (p_group, p_identity)
    ON CONFLICT DO NOTHING;
    added := FOUND;
    IF added THEN
        PERFORM occ.audit_admission(p_actor, 'openclaw.iam.groups.add_member', 'iam_group',
            p_group, NULL, NULL, jsonb_build_object('identityId', p_identity));
    END IF;
    RETURN jsonb_build_object('groupId', p_group, 'identityId', p_identity, 'added', added);
END $$;

-- Removes IDENTITY from GROUP: the group's bindings no longer apply to it. Installation
-- `administer` required; the last installation administrator's membership stays.
CREATE FUNCTION occ.group_remove_member(p_actor text, p_group text, p_identity text)
RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'change group membership');
    PERFORM pg_advisory_xact_lock(hashtext('occ.installation_admins'));
    DELETE FROM occ.iam_group_members WHERE group_id = p_group AND identity_id = p_identity;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'identity % is not a member of group %', p_identity, p_group
            USING ERRCODE = 'no_data_found';
    END IF;
    IF NOT occ.installation_administered() THEN
        RAISE EXCEPTION 'identity % is the last installation administrator', p_identity
            USING ERRCODE = 'object_in_use';
    END IF;
    PERFORM occ.audit_admission(p_actor, 'openclaw.iam.groups.remove_member', 'iam_group',
        p_group, NULL, NULL, jsonb_build_object('identityId', p_identity));
    RETURN jsonb_build_object('groupId', p_group, 'identityId', p_identity, 'removed', true);
END $$;

-- Namespaces ------------------------------------------------------------------------------

CREATE FUNCTION occ.namespace_json(p_id text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', n.id, 'name', n.name, 'status', n.status,
        'existingNamespace', n.existing_namespace, 'createdBy', n.created_by,
        'createdAt', to_char(n.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'updatedAt', to_char(n.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'agents', (SELECT count(*) FROM occ.agents a WHERE a.namespace_id = n.id),
        'work', coalesce((SELECT jsonb_agg(jsonb_build_object(
                    'key', w.idempotency_key, 'state', w.state, 'attempts', w.attempt_count,
                    'reasonCode', w.reason_code) ORDER BY w.id)
                FROM occ.work w WHERE w.namespace_id = n.id AND w.agent_id IS NULL), '[]'))
    FROM occ.namespaces n WHERE n.id = p_id
$$;

-- N1: stores the Namespace `provisioning` and enqueues `namespace:<id>:ensure` in one
-- transaction. Needs `create` on Namespaces in the installation; `existing_namespace` (an
-- exact Kubernetes namespace to adopt) also needs Installation `administer`.
CREATE FUNCTION occ.namespace_create(p_actor text, p_name text, p_existing_namespace text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    inst text := occ.installation_id();
    ns text := 'ns-' || substr(md5(gen_random_uuid()::text), 1, 8);
    work_id bigint;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'create', 'namespace', inst, NULL, 'create Namespaces');
    IF p_existing_namespace IS NOT NULL THEN
        PERFORM occ.require_authorized(p_actor, 'administer', 'installation', inst, NULL,
                                       'adopt an existing namespace');
    END IF;
    IF NOT occ.is_ident(p_name) THEN
        RAISE EXCEPTION 'invalid Namespace name %: lowercase letters, digits, - and _, at most 63',
            p_name USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_existing_namespace IS NOT NULL
       AND p_existing_namespace !~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$' THEN
        RAISE EXCEPTION 'invalid existing namespace %: a Kubernetes namespace name',
            p_existing_namespace USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('occ.namespace_name:' || p_name));
    IF EXISTS (SELECT 1 FROM occ.namespaces WHERE name = p_name) THEN
        RAISE EXCEPTION 'a Namespace named % already exists', p_name
            USING ERRCODE = 'unique_violation';
    END IF;
    IF p_existing_namespace IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('occ.existing_namespace:' || p_existing_namespace));
        IF EXISTS (SELECT 1 FROM occ.namespaces WHERE existing_namespace = p_existing_namespace) THEN
            RAISE EXCEPTION 'namespace % is already adopted by another Namespace', p_existing_namespace
                USING ERRCODE = 'unique_violation';
        END IF;
    END IF;
    INSERT INTO occ.namespaces_all (id, name, status, existing_namespace, created_by)
    VALUES (ns, p_name, 'provisioning', p_existing_namespace, p_actor);
    INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
    VALUES ('namespace:' || ns || ':ensure', ns, 'ready', p_actor)
    RETURNING id INTO work_id;
    PERFORM occ.audit_admission(p_actor, 'openclaw.namespaces.create', 'namespace', ns, ns, work_id,
        jsonb_build_object('name', p_name, 'existingNamespace', p_existing_namespace,
                           'workKey', 'namespace:' || ns || ':ensure'));
    RETURN occ.namespace_json(ns);
END $$;

-- N4: deletes an empty Namespace: stores `deleting` and enqueues `namespace:<id>:delete`.
-- Needs `delete` on the Namespace; refused while it has Agents or is already deleting.
CREATE FUNCTION occ.namespace_delete(p_actor text, p_namespace text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    ns occ.namespaces_all;
    agents bigint;
    work_id bigint;
BEGIN
    SELECT * INTO ns FROM occ.namespaces_all WHERE id = occ.resolve_namespace(p_namespace) FOR UPDATE;
    PERFORM occ.require_authorized(p_actor, 'delete', 'namespace', ns.id, ns.id, 'delete Namespace ' || ns.name);
    IF ns.status = 'deleting' THEN
        RAISE EXCEPTION 'Namespace % is already being deleted', ns.name USING ERRCODE = 'object_in_use';
    END IF;
    SELECT count(*) INTO agents FROM occ.agents WHERE namespace_id = ns.id;
    IF agents > 0 THEN
        RAISE EXCEPTION 'Namespace % is not empty: it still has % Agent(s); delete them first',
            ns.name, agents USING ERRCODE = 'dependent_objects_still_exist';
    END IF;
    UPDATE occ.namespaces_all SET status = 'deleting', updated_at = clock_timestamp() WHERE id = ns.id;
    INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
    VALUES ('namespace:' || ns.id || ':delete', ns.id, 'deleted', p_actor)
    RETURNING id INTO work_id;
    PERFORM occ.audit_admission(p_actor, 'openclaw.namespaces.delete', 'namespace', ns.id, ns.id, work_id,
        jsonb_build_object('name', ns.name, 'previousStatus', ns.status,
                           'workKey', 'namespace:' || ns.id || ':delete'));
    RETURN occ.namespace_json(ns.id);
END $$;

-- Q9: explicit retry of a failed Namespace deletion. KEY must name the latest deletion work of
-- a Namespace still `deleting`, and that work must be `failed_permanent`; the retry is
-- `namespace:<id>:delete:<n>` with n = the number of deletion works so far + 1 (the first
-- retry is `:delete:2`). Needs `delete` on the Namespace.
CREATE FUNCTION occ.namespace_delete_retry(p_actor text, p_key text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    failed occ.work;
    latest occ.work;
    ns occ.namespaces_all;
    n bigint;
    new_key text;
    work_id bigint;
BEGIN
    SELECT * INTO failed FROM occ.work WHERE idempotency_key = p_key;
    IF failed.id IS NULL OR failed.namespace_target IS DISTINCT FROM 'deleted' THEN
        RAISE EXCEPTION 'no Namespace deletion work %', p_key USING ERRCODE = 'no_data_found';
    END IF;
    SELECT * INTO ns FROM occ.namespaces_all WHERE id = failed.namespace_id FOR UPDATE;
    PERFORM occ.require_authorized(p_actor, 'delete', 'namespace', ns.id, ns.id,
                                   'retry the deletion of Namespace ' || ns.name);
    IF ns.deleted_at IS NOT NULL OR ns.status <> 'deleting' THEN
        RAISE EXCEPTION 'Namespace % is not being deleted', ns.name
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT * INTO latest FROM occ.work
    WHERE namespace_id = ns.id AND namespace_target = 'deleted' ORDER BY id DESC LIMIT 1;
    IF latest.id <> failed.id THEN
        RAISE EXCEPTION 'work % is not the latest deletion of Namespace % (that is %)',
            p_key, ns.name, latest.idempotency_key USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF latest.state <> 'failed_permanent' THEN
        RAISE EXCEPTION 'work % is %, not failed_permanent: only a failed deletion can be retried',
            p_key, latest.state USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT count(*) + 1 INTO n FROM occ.work WHERE namespace_id = ns.id AND namespace_target = 'deleted';
    new_key := 'namespace:' || ns.id || ':delete:' || n;
    INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
    VALUES (new_key, ns.id, 'deleted', p_actor)
    RETURNING id INTO work_id;
    PERFORM occ.audit_admission(p_actor, 'openclaw.namespaces.delete.retry', 'namespace', ns.id, ns.id,
        work_id, jsonb_build_object('failedKey', p_key, 'failedReasonCode', latest.reason_code,
                                    'workKey', new_key));
    RETURN jsonb_build_object('key', new_key, 'workId', work_id, 'namespaceId', ns.id,
                              'retryOf', p_key);
END $$;

-- Reads for the operator: live Namespaces only (tombstones stay invisible).
CREATE FUNCTION occ.namespace_list() RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(occ.namespace_json(id) ORDER BY name), '[]') FROM occ.namespaces
$$;

CREATE FUNCTION occ.namespace_show(p_namespace text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT occ.namespace_json(occ.resolve_namespace(p_namespace))
$$;

-- The audit trail: the latest p_limit events, oldest first, optionally for one Namespace (id
-- or name, tombstones included) and since a time.
CREATE FUNCTION occ.audit_list(p_namespace text DEFAULT NULL, p_since timestamptz DEFAULT NULL,
                               p_limit integer DEFAULT 1000)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(e ORDER BY (e ->> 'id')::bigint), '[]') FROM (
        SELECT jsonb_build_object(
            'id', a.id,
            'occurredAt', to_char(a.occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'kind', a.kind, 'actorId', a.actor_id, 'action', a.action,
            'resourceKind', a.resource_kind, 'resourceId', a.resource_id,
            'namespaceId', a.namespace_id, 'outcome', a.outcome, 'reasonCode', a.reason_code,
            'workId', a.work_id, 'details', a.details) AS e
        FROM occ.audit_events a
        WHERE (p_namespace IS NULL OR a.namespace_id IN (
                  SELECT id FROM occ.namespaces_all WHERE id = p_namespace OR name = p_namespace))
          AND (p_since IS NULL OR a.occurred_at >= p_since)
        ORDER BY a.id DESC
        LIMIT p_limit) sub
$$;
