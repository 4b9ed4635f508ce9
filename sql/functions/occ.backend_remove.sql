-- `admin backend remove`: revisions admitted on it fail `BACKEND_UNAVAILABLE` from their next
-- pass on, and no new deployment binds to it.
CREATE OR REPLACE FUNCTION occ.backend_remove(p_actor text, p_id text) RETURNS jsonb
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
