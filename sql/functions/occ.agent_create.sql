-- Agent create: the Agent and its stable service principal in one transaction.
CREATE OR REPLACE FUNCTION occ.agent_create(p_namespace text, p_name text, p_actor text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    agent_id text := occ.agent_new_id('ag');
    principal text := occ.agent_new_id('sp');
BEGIN
    p_namespace := occ.agent_lock_ready_namespace(p_namespace);
    PERFORM occ.agent_require(p_actor, 'create', 'agent', p_name, p_namespace);
    IF EXISTS (SELECT 1 FROM occ.agents WHERE namespace_id = p_namespace AND name = p_name) THEN
        RAISE EXCEPTION 'agent %/% already exists', p_namespace, p_name USING ERRCODE = 'unique_violation';
    END IF;
    INSERT INTO occ.agents (id, namespace_id, name, service_principal_id, created_by)
    VALUES (agent_id, p_namespace, p_name, principal, p_actor);
    INSERT INTO occ.identities (id, kind, namespace_id, agent_id)
    VALUES (principal, 'service_principal', p_namespace, agent_id);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.create', 'agent', agent_id,
        jsonb_build_object('name', p_name, 'servicePrincipalId', principal));
    RETURN jsonb_build_object('id', agent_id, 'namespaceId', p_namespace, 'name', p_name,
        'servicePrincipalId', principal);
END $$;
