-- Removes the binding of ROLE to PRINCIPAL (an identity, or `group:ID`) on SCOPE.
-- Installation `administer` required; the last installation administrator's binding stays.
CREATE OR REPLACE FUNCTION occ.binding_revoke(p_actor text, p_principal text, p_role text, p_scope text)
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
