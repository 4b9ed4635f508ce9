-- Creates an empty group. Installation `administer` required.
CREATE OR REPLACE FUNCTION occ.group_create(p_actor text, p_id text) RETURNS jsonb
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
