-- Q9: explicit retry of a failed Namespace deletion. KEY must name the latest deletion work of
-- a Namespace still `deleting`, and that work must be `failed_permanent`; the retry is
-- `namespace:<id>:delete:<n>` with n = the number of deletion works so far + 1 (the first
-- retry is `:delete:2`). Needs `delete` on the Namespace.
CREATE OR REPLACE FUNCTION occ.namespace_delete_retry(p_actor text, p_key text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    failed occ.work;
    latest occ.work;
    ns occ.namespaces_all;
    n bigint;
    new_key text;
    work_id bigint;
BEGIN
    SELECT * INTO failed FROM occ.work WHERE idempotency_key = p_key;
    IF failed.id IS NULL OR failed.namespace_target IS DISTINCT FROM 'deleted' THEN
        RAISE EXCEPTION 'no Namespace deletion work %', p_key USING ERRCODE = 'no_data_found';
    END IF;
    SELECT * INTO ns FROM occ.namespaces_all WHERE id = failed.namespace_id FOR UPDATE;
    PERFORM occ.require_authorized(p_actor, 'delete', 'namespace', ns.id, ns.id,
                                   'retry the deletion of Namespace ' || ns.name);
    IF ns.deleted_at IS NOT NULL THEN
        RAISE EXCEPTION 'Namespace % was deleted at %: its deletion succeeded, there is nothing to retry',
            ns.name, to_char(ns.deleted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF ns.status <> 'deleting' THEN
        RAISE EXCEPTION 'Namespace % is %, not being deleted', ns.name, ns.status
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT * INTO latest FROM occ.work
    WHERE namespace_id = ns.id AND namespace_target = 'deleted' ORDER BY id DESC LIMIT 1;
    IF latest.id <> failed.id THEN
        RAISE EXCEPTION 'work % is not the latest deletion of Namespace % (that is %)',
            p_key, ns.name, latest.idempotency_key USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF latest.state <> 'failed_permanent' THEN
        RAISE EXCEPTION 'work % is %, not failed_permanent: only a failed deletion can be retried',
            p_key, latest.state USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT count(*) + 1 INTO n FROM occ.work WHERE namespace_id = ns.id AND namespace_target = 'deleted';
    new_key := 'namespace:' || ns.id || ':delete:' || n;
    INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
    VALUES (new_key, ns.id, 'deleted', p_actor)
    RETURNING id INTO work_id;
    PERFORM occ.audit_admission(p_actor, 'openclaw.namespaces.delete.retry', 'namespace', ns.id, ns.id,
        work_id, jsonb_build_object('failedKey', p_key, 'failedReasonCode', latest.reason_code,
                                    'workKey', new_key));
    RETURN jsonb_build_object('key', new_key, 'workId', work_id, 'namespaceId', ns.id,
                              'retryOf', p_key);
END $$;
