-- Stop (A1): desired `stopped` and the next `agent:<id>:stop:<n>`.
CREATE OR REPLACE FUNCTION occ.agent_stop(p_namespace text, p_agent text, p_actor text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    a occ.agents;
    n integer;
    work_key text;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    a := occ.agent_lock(p_namespace, p_agent);
    PERFORM occ.agent_require(p_actor, 'operate', 'agent', a.id, p_namespace);
    UPDATE occ.agents SET desired_runtime_state = 'stopped', updated_at = clock_timestamp()
    WHERE id = a.id;
    SELECT count(*) + 1 INTO n FROM occ.work WHERE agent_id = a.id AND agent_target = 'stopped';
    work_key := 'agent:' || a.id || ':stop:' || n;
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, agent_target, actor_id)
    VALUES (work_key, p_namespace, a.id, 'stopped', p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.stop.admit', 'agent', a.id, '{}');
    RETURN jsonb_build_object('agentId', a.id, 'work', work_key);
END $$;
