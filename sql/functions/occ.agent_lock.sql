-- Locks the named Agent (by id or name) for a synchronous mutation; refuses a deleting Agent
-- unless `p_allow_deleting`.
CREATE OR REPLACE FUNCTION occ.agent_lock(p_namespace text, p_agent text, p_allow_deleting boolean DEFAULT false)
RETURNS occ.agents LANGUAGE plpgsql AS $$
DECLARE
    a occ.agents;
BEGIN
    SELECT * INTO a FROM occ.agents
    WHERE namespace_id = p_namespace AND (id = p_agent OR name = p_agent)
    ORDER BY (id = p_agent) DESC LIMIT 1
    FOR UPDATE;
    IF a.id IS NULL THEN
        RAISE EXCEPTION 'agent %/% does not exist', p_namespace, p_agent USING ERRCODE = 'no_data_found';
    END IF;
    IF a.status = 'deleting' AND NOT p_allow_deleting THEN
        RAISE EXCEPTION 'agent %/% is being deleted', p_namespace, a.id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN a;
END $$;
