-- `admin backend add`: configures a backend (installation `administer`, audited). Adding an
-- existing backend with the same type changes nothing.
CREATE OR REPLACE FUNCTION occ.backend_add(p_actor text, p_id text, p_type text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    existing text;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'configure backends');
    SELECT type INTO existing FROM occ.backends WHERE id = p_id FOR UPDATE;
    IF existing IS NOT NULL AND existing IS DISTINCT FROM p_type THEN
        RAISE EXCEPTION 'backend % already exists with type %', p_id, existing
            USING ERRCODE = 'unique_violation';
    END IF;
    IF existing IS NULL THEN
        INSERT INTO occ.backends (id, type, created_by) VALUES (p_id, p_type, p_actor);
        PERFORM occ.audit_admission(p_actor, 'openclaw.backends.add', 'installation',
            occ.installation_id(), NULL, NULL, jsonb_build_object('backendId', p_id, 'type', p_type));
    END IF;
    RETURN jsonb_build_object('id', p_id, 'type', p_type, 'created', existing IS NULL);
END $$;
