-- SPEC WS1: removes the Agent's workspace setup under the same locks and grant as a put, and
-- audits; an Agent without one is refused.
CREATE OR REPLACE FUNCTION occ.workspace_setup_clear(p_actor text, p_namespace text, p_agent text)
RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    ns text := occ.resolve_namespace(p_namespace);
    a occ.agents;
    cleared text;
BEGIN
    PERFORM 1 FROM occ.namespaces_all WHERE id = ns FOR SHARE;
    a := occ.agent_lock(ns, p_agent);
    PERFORM occ.agent_require(p_actor, 'operate', 'agent', a.id, ns);
    DELETE FROM occ.workspace_setups WHERE agent_id = a.id RETURNING id INTO cleared;
    IF cleared IS NULL THEN
        RAISE EXCEPTION 'agent %/% has no workspace setup', ns, a.id USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.agent_audit(ns, p_actor, 'openclaw.agents.workspace_setup.clear', 'agent', a.id,
        jsonb_build_object('setupId', cleared));
    RETURN jsonb_build_object('agentId', a.id, 'cleared', cleared);
END $$;
