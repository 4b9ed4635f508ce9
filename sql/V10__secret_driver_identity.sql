-- Secret Driver identity (SPEC Z4, seed 004 914-927, 1271-1282, 5284-5346).
--
-- The Installation selects at most one Secret Driver (`installation.secret_driver_id`, NULL:
-- none); the worker refuses to start unless its own Secret Driver is the selected one. Every
-- Secret records the Secret Driver that owns it (`driver_id`) and its backend object's `uid`;
-- every revision freezes the selected driver at admission (`secret_driver_id`, and
-- `secretDriverId` in a `secret` harness auth). The worker counts a Secret only when its driver
-- is the selected one and its backend reference and uid are not blank, and refuses a revision
-- whose frozen driver is not the selected one (`SECRET_DRIVER_MISMATCH`).
--
-- [D] A fresh or existing Installation selects the built-in Secret Driver `occ-secrets` (the
-- worker's default `OCC_SECRET_DRIVER`). A Secret created without a backend uid gets a
-- generated one, and existing Secrets and revisions are given the selection and a uid here, so
-- rows admitted before this migration keep deploying as they did.

ALTER TABLE occ.installation
    ADD COLUMN secret_driver_id text NULL DEFAULT 'occ-secrets'
        CONSTRAINT installation_secret_driver_id_check CHECK (occ.is_ident(secret_driver_id));

ALTER TABLE occ.secrets
    ADD COLUMN driver_id text NULL,
    ADD COLUMN uid text NULL;
UPDATE occ.secrets
SET driver_id = coalesce((SELECT secret_driver_id FROM occ.installation), 'occ-secrets'),
    uid = gen_random_uuid()::text;
ALTER TABLE occ.secrets
    ALTER COLUMN driver_id SET NOT NULL,
    ALTER COLUMN uid SET NOT NULL,
    ALTER COLUMN uid SET DEFAULT gen_random_uuid()::text,
    ADD CONSTRAINT secrets_driver_id_check CHECK (occ.is_ident(driver_id)),
    -- A backend object uid (a Kubernetes metadata.uid is a UUID): no blanks, bounded.
    ADD CONSTRAINT secrets_uid_check CHECK (uid ~ '^[A-Za-z0-9][-A-Za-z0-9._:]{0,127}$');

ALTER TABLE occ.agent_revisions
    ADD COLUMN secret_driver_id text NULL
        CONSTRAINT agent_revisions_secret_driver_id_check CHECK (occ.is_ident(secret_driver_id)),
    ADD CONSTRAINT agent_revisions_secret_driver_frozen_check CHECK (
        harness_auth IS NULL OR harness_auth->>'method' <> 'secret'
        OR harness_auth->'secretDriverId' IS NULL
        OR jsonb_typeof(harness_auth->'secretDriverId') = 'string');
-- The snapshot guard (V4) forbids changing an admitted revision; this one backfill is the
-- migration's own.
ALTER TABLE occ.agent_revisions DISABLE TRIGGER agent_revisions_guard;
UPDATE occ.agent_revisions
SET secret_driver_id = (SELECT secret_driver_id FROM occ.installation),
    harness_auth = CASE
        WHEN harness_auth->>'method' = 'secret' AND (SELECT secret_driver_id FROM occ.installation) IS NOT NULL
        THEN harness_auth || jsonb_build_object('secretDriverId', (SELECT secret_driver_id FROM occ.installation))
        ELSE harness_auth END;
ALTER TABLE occ.agent_revisions ENABLE TRIGGER agent_revisions_guard;

-- A Secret written without a driver belongs to the Installation's selection (and without one
-- is refused as NOT NULL).
CREATE FUNCTION occ.secret_default_driver() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.driver_id IS NULL THEN
        SELECT secret_driver_id INTO NEW.driver_id FROM occ.installation;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER secrets_default_driver BEFORE INSERT ON occ.secrets
    FOR EACH ROW EXECUTE FUNCTION occ.secret_default_driver();

-- Admission freezes the Installation's selected Secret Driver into every new revision, whatever
-- function admitted it, unless the row names one itself.
CREATE FUNCTION occ.agent_revision_freeze_secret_driver() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    selected text;
BEGIN
    SELECT secret_driver_id INTO selected FROM occ.installation;
    IF NEW.secret_driver_id IS NULL THEN
        NEW.secret_driver_id := selected;
    END IF;
    IF NEW.harness_auth->>'method' = 'secret' AND NEW.harness_auth->'secretDriverId' IS NULL
       AND selected IS NOT NULL THEN
        NEW.harness_auth := NEW.harness_auth || jsonb_build_object('secretDriverId', selected);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER agent_revisions_freeze_secret_driver BEFORE INSERT ON occ.agent_revisions
    FOR EACH ROW EXECUTE FUNCTION occ.agent_revision_freeze_secret_driver();

-- Secret create, naming the owning Secret Driver and the backend object's uid. A NULL driver is
-- the Installation's selection (refused when it selects none); a NULL uid is generated.
CREATE FUNCTION occ.secret_create(p_namespace text, p_id text, p_backend_ref text, p_actor text,
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

-- The four-argument form of V4 keeps working: the selected driver, a generated uid.
CREATE OR REPLACE FUNCTION occ.secret_create(p_namespace text, p_id text, p_backend_ref text, p_actor text)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT occ.secret_create(p_namespace, p_id, p_backend_ref, p_actor, NULL::text, NULL::text)
$$;
