-- N4: deletes an empty Namespace: stores `deleting` and enqueues `namespace:<id>:delete`.
-- Needs `delete` on the Namespace; refused while it has Agents or is already deleting.
CREATE OR REPLACE FUNCTION occ.namespace_delete(p_actor text, p_namespace text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    ns occ.namespaces_all;
    agents bigint;
    work_id bigint;
BEGIN
    SELECT * INTO ns FROM occ.namespaces_all WHERE id = occ.resolve_namespace(p_namespace) FOR UPDATE;
    PERFORM occ.require_authorized(p_actor, 'delete', 'namespace', ns.id, ns.id, 'delete Namespace ' || ns.name);
    IF ns.status = 'deleting' THEN
        RAISE EXCEPTION 'Namespace % is already being deleted', ns.name USING ERRCODE = 'object_in_use';
    END IF;
    SELECT count(*) INTO agents FROM occ.agents WHERE namespace_id = ns.id;
    IF agents > 0 THEN
        RAISE EXCEPTION 'Namespace % is not empty: it still has % Agent(s); delete them first',
            ns.name, agents USING ERRCODE = 'dependent_objects_still_exist';
    END IF;
    UPDATE occ.namespaces_all SET status = 'deleting', updated_at = clock_timestamp() WHERE id = ns.id;
    INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
    VALUES ('namespace:' || ns.id || ':delete', ns.id, 'deleted', p_actor)
    RETURNING id INTO work_id;
    PERFORM occ.audit_admission(p_actor, 'openclaw.namespaces.delete', 'namespace', ns.id, ns.id, work_id,
        jsonb_build_object('name', ns.name, 'previousStatus', ns.status,
                           'workKey', 'namespace:' || ns.id || ':delete'));
    RETURN occ.namespace_json(ns.id);
END $$;
