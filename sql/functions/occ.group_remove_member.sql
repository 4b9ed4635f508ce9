-- Removes IDENTITY from GROUP: the group's bindings no longer apply to it. Installation
-- `administer` required; the last installation administrator's membership stays.
CREATE OR REPLACE FUNCTION occ.group_remove_member(p_actor text, p_group text, p_identity text)
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
