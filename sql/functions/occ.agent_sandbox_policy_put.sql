-- SPEC S3 admission: needs `operate` on an Agent that is not deleting and the policy within
-- the ceiling the caller passes (the CLI passes `sandboxNetworkPolicyCeiling`); stores the next
-- generation `pending`, enqueues its work and audits.
CREATE OR REPLACE FUNCTION occ.agent_sandbox_policy_put(p_actor text, p_namespace text, p_agent text,
        p_policy jsonb, p_ceiling jsonb DEFAULT '[]'::jsonb) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    a occ.agents;
    egress jsonb := p_policy->'egress';
    ceiling jsonb := coalesce(p_ceiling, '[]'::jsonb);
    gen integer;
    work_key text;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    a := occ.agent_lock(p_namespace, p_agent);
    PERFORM occ.agent_require(p_actor, 'operate', 'agent', a.id, p_namespace);
    IF jsonb_typeof(p_policy) IS DISTINCT FROM 'object' OR NOT coalesce(occ.is_egress(egress), false) THEN
        RAISE EXCEPTION 'a sandbox policy is {"egress": [{"cidr": NETWORK, "ports": [TCP PORT 1-65535, ...]}, ...]}'
            USING ERRCODE = 'check_violation';
    END IF;
    IF NOT coalesce(occ.is_egress(ceiling), false) THEN
        RAISE EXCEPTION 'the sandbox network policy ceiling must be [{"cidr": NETWORK, "ports": [...]}, ...]'
            USING ERRCODE = 'check_violation';
    END IF;
    BEGIN
        PERFORM (e->>'cidr')::cidr FROM jsonb_array_elements(egress || ceiling) e;
    EXCEPTION WHEN invalid_text_representation OR invalid_binary_representation THEN
        RAISE EXCEPTION 'a sandbox policy cidr must be a network with its host bits zero, such as 10.0.0.0/8'
            USING ERRCODE = 'check_violation';
    END;
    IF NOT occ.egress_within(egress, ceiling) THEN
        RAISE EXCEPTION 'SANDBOX_POLICY_EXCEEDS_CEILING: the policy allows egress outside the sandbox network policy ceiling'
            USING ERRCODE = 'check_violation', HINT = 'SANDBOX_POLICY_EXCEEDS_CEILING';
    END IF;
    INSERT INTO occ.agent_sandbox_policies AS p (agent_id, namespace_id, generation, egress, updated_by)
    VALUES (a.id, p_namespace, 1, egress, p_actor)
    ON CONFLICT (agent_id) DO UPDATE
        SET generation = p.generation + 1, egress = EXCLUDED.egress, state = 'pending',
            reason_code = NULL, updated_by = EXCLUDED.updated_by, updated_at = clock_timestamp()
    RETURNING generation INTO gen;
    work_key := 'agent:' || a.id || ':sandbox_policy:' || gen;
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, agent_target, actor_id)
    VALUES (work_key, p_namespace, a.id, 'sandbox_policy', p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.sandbox_policy.admit', 'agent', a.id,
        jsonb_build_object('generation', gen, 'egress', egress));
    RETURN jsonb_build_object('agentId', a.id, 'generation', gen, 'state', 'pending',
        'egress', egress, 'work', work_key);
END $$;
