-- Grants ROLE to PRINCIPAL (an identity, or `group:ID`) on SCOPE (idempotent). Installation
-- `administer` required.
CREATE OR REPLACE FUNCTION occ.binding_grant(p_actor text, p_principal text, p_role text, p_scope text)
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
