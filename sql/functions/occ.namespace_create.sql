-- N1: stores the Namespace `provisioning` and enqueues `namespace:<id>:ensure` in one
-- transaction. Needs `create` on Namespaces in the installation; `existing_namespace` (an
-- exact Kubernetes namespace to adopt) also needs Installation `administer`. A drawn id that
-- is taken is drawn again (`occ.namespace_new_id`), at most eight times.
CREATE OR REPLACE FUNCTION occ.namespace_create(p_actor text, p_name text, p_existing_namespace text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    inst text := occ.installation_id();
    ns text;
    work_id bigint;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'create', 'namespace', inst, NULL, 'create Namespaces');
    IF p_existing_namespace IS NOT NULL THEN
        PERFORM occ.require_authorized(p_actor, 'administer', 'installation', inst, NULL,
                                       'adopt an existing namespace');
    END IF;
    IF NOT occ.is_ident(p_name) THEN
        RAISE EXCEPTION 'invalid Namespace name %: lowercase letters, digits, - and _, at most 63',
            p_name USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_existing_namespace IS NOT NULL
       AND p_existing_namespace !~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$' THEN
        RAISE EXCEPTION 'invalid existing namespace %: a Kubernetes namespace name',
            p_existing_namespace USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('occ.namespace_name:' || p_name));
    IF EXISTS (SELECT 1 FROM occ.namespaces WHERE name = p_name) THEN
        RAISE EXCEPTION 'a Namespace named % already exists', p_name
            USING ERRCODE = 'unique_violation';
    END IF;
    IF p_existing_namespace IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('occ.existing_namespace:' || p_existing_namespace));
        IF EXISTS (SELECT 1 FROM occ.namespaces WHERE existing_namespace = p_existing_namespace) THEN
            RAISE EXCEPTION 'namespace % is already adopted by another Namespace', p_existing_namespace
                USING ERRCODE = 'unique_violation';
        END IF;
    END IF;
    -- A drawn id that is taken (by a live or a deleted Namespace) is drawn again.
    FOR draw IN 1..8 LOOP
        ns := occ.namespace_new_id();
        INSERT INTO occ.namespaces_all (id, name, status, existing_namespace, created_by)
        VALUES (ns, p_name, 'provisioning', p_existing_namespace, p_actor)
        ON CONFLICT (id) DO NOTHING;
        EXIT WHEN FOUND;
        ns := NULL;
    END LOOP;
    IF ns IS NULL THEN
        RAISE EXCEPTION 'no free Namespace id in 8 draws'
            USING ERRCODE = 'unique_violation';
    END IF;
    INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
    VALUES ('namespace:' || ns || ':ensure', ns, 'ready', p_actor)
    RETURNING id INTO work_id;
    PERFORM occ.audit_admission(p_actor, 'openclaw.namespaces.create', 'namespace', ns, ns, work_id,
        jsonb_build_object('name', p_name, 'existingNamespace', p_existing_namespace,
                           'workKey', 'namespace:' || ns || ':ensure'));
    RETURN occ.namespace_json(ns);
END $$;
