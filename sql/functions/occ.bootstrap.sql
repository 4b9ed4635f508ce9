-- Bootstrap: the Installation and its first administrator (SPEC section 9). Idempotent: a
-- second call with the same arguments changes nothing; a different Installation id is refused.
CREATE OR REPLACE FUNCTION occ.bootstrap(p_installation text, p_admin text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    existing text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('occ.bootstrap'));
    SELECT id INTO existing FROM occ.installation;
    IF existing IS NOT NULL AND existing <> p_installation THEN
        RAISE EXCEPTION 'installation % already exists', existing
            USING ERRCODE = 'unique_violation';
    END IF;
    INSERT INTO occ.installation (id) VALUES (p_installation) ON CONFLICT DO NOTHING;
    INSERT INTO occ.identities (id, kind) VALUES (p_admin, 'user') ON CONFLICT DO NOTHING;
    IF NOT EXISTS (SELECT 1 FROM occ.identities WHERE id = p_admin AND kind = 'user') THEN
        RAISE EXCEPTION 'identity % is not a user', p_admin USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind)
    VALUES (p_admin, 'installation-admin', 'installation') ON CONFLICT DO NOTHING;
    RETURN jsonb_build_object('installation', p_installation, 'admin', p_admin);
END $$;
