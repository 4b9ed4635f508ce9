-- Secret create, naming the owning Secret Driver and the backend object's uid. A NULL driver is
-- the Installation's selection (refused when it selects none); a NULL uid is generated.
CREATE OR REPLACE FUNCTION occ.secret_create(p_namespace text, p_id text, p_backend_ref text, p_actor text,
                                  p_driver_id text, p_uid text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    driver text := p_driver_id;
    uid text := coalesce(p_uid, gen_random_uuid()::text);
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    PERFORM occ.agent_require(p_actor, 'create', 'secret', p_id, p_namespace);
    IF driver IS NULL THEN
        SELECT secret_driver_id INTO driver FROM occ.installation;
        IF driver IS NULL THEN
            RAISE EXCEPTION 'the Installation selects no Secret Driver: name one with --driver'
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    INSERT INTO occ.secrets (namespace_id, id, backend_ref, created_by, driver_id, uid)
    VALUES (p_namespace, p_id, p_backend_ref, p_actor, driver, uid);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.secrets.create', 'secret', p_id,
        jsonb_build_object('driverId', driver));
    RETURN jsonb_build_object('namespaceId', p_namespace, 'id', p_id, 'backendRef', p_backend_ref,
                              'driverId', driver, 'uid', uid);
END $$;

-- The four-argument form (V4's) keeps working: the selected driver, a generated uid.
CREATE OR REPLACE FUNCTION occ.secret_create(p_namespace text, p_id text, p_backend_ref text, p_actor text)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT occ.secret_create(p_namespace, p_id, p_backend_ref, p_actor, NULL::text, NULL::text)
$$;
