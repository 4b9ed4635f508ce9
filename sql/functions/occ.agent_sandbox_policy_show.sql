-- The Agent's sandbox policy as stored (SPEC S3), or null when it has none.
CREATE OR REPLACE FUNCTION occ.agent_sandbox_policy_show(p_namespace text, p_agent text) RETURNS jsonb
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
    RETURN (SELECT jsonb_build_object('agentId', p.agent_id, 'namespaceId', p.namespace_id,
                'generation', p.generation, 'egress', p.egress, 'state', p.state,
                'reasonCode', p.reason_code, 'updatedBy', p.updated_by,
                'updatedAt', to_char(p.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                'work', 'agent:' || p.agent_id || ':sandbox_policy:' || p.generation)
            FROM occ.agent_sandbox_policies p WHERE p.agent_id = a.id);
END $$;
