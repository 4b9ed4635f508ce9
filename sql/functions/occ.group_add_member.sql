-- Adds IDENTITY to GROUP (idempotent). Installation `administer` required.
CREATE OR REPLACE FUNCTION occ.group_add_member(p_actor text, p_group text, p_identity text) RETURNS jsonb
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
