-- SPEC WS1: the Agent's workspace setup with its document, or null when it has none.
CREATE OR REPLACE FUNCTION occ.workspace_setup_show(p_namespace text, p_agent text) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    ns text := occ.resolve_namespace(p_namespace);
    a occ.agents;
BEGIN
    SELECT * INTO a FROM occ.agents
    WHERE namespace_id = ns AND (id = p_agent OR name = p_agent)
    ORDER BY (id = p_agent) DESC LIMIT 1;
    IF a.id IS NULL THEN
        RAISE EXCEPTION 'agent %/% does not exist', ns, p_agent USING ERRCODE = 'no_data_found';
    END IF;
    RETURN (SELECT occ.workspace_setup_json(s, true) FROM occ.workspace_setups s
            WHERE s.agent_id = a.id);
END $$;
