-- Delete (A2): status `deleting`, desired `stopped`, `agent:<id>:delete`. Called again on an
-- Agent whose last deletion failed for good, it is the explicit retry (`:delete:<n>`, Q9).
CREATE OR REPLACE FUNCTION occ.agent_delete(p_namespace text, p_agent text, p_actor text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    a occ.agents;
    n integer;
    work_key text;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    a := occ.agent_lock(p_namespace, p_agent, true);
    PERFORM occ.agent_require(p_actor, 'delete', 'agent', a.id, p_namespace);
    IF a.status = 'deleting' THEN
        IF EXISTS (SELECT 1 FROM occ.work WHERE agent_id = a.id AND agent_target = 'deleted'
                   AND state IN ('queued', 'claimed')) THEN
            RAISE EXCEPTION 'agent %/% is being deleted', p_namespace, a.id
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        SELECT count(*) INTO n FROM occ.work WHERE agent_id = a.id AND agent_target = 'deleted';
        work_key := 'agent:' || a.id || ':delete:' || n;
    ELSE
        UPDATE occ.agents SET status = 'deleting', desired_runtime_state = 'stopped',
            updated_at = clock_timestamp()
        WHERE id = a.id;
        work_key := 'agent:' || a.id || ':delete';
    END IF;
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, agent_target, actor_id)
    VALUES (work_key, p_namespace, a.id, 'deleted', p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.delete.admit', 'agent', a.id, '{}');
    RETURN jsonb_build_object('agentId', a.id, 'work', work_key);
END $$;
