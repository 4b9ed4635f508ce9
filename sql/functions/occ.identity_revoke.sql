-- Revokes an identity by removing it; its bindings and restrictions cascade. The last
-- installation administrator cannot be revoked (the installation would become unmanageable).
CREATE OR REPLACE FUNCTION occ.identity_revoke(p_actor text, p_id text) RETURNS jsonb
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
