CREATE OR REPLACE FUNCTION occ.agent_audit(p_namespace text, p_actor text, p_action text, p_kind text,
                                p_resource text, p_details jsonb) RETURNS void
LANGUAGE sql AS $$
    SELECT occ.audit_admission(p_actor, p_action, p_kind, p_resource, p_namespace, NULL, p_details)
$$;
