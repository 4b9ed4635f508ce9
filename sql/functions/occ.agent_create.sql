-- Agent create: the Agent and its stable service principal in one transaction, with its
-- explicit execution mode (SPEC R1; NULL: not set, each deployment's mode decides).
CREATE OR REPLACE FUNCTION occ.agent_create(p_namespace text, p_name text, p_actor text, p_execution_mode text DEFAULT NULL::text) RETURNS jsonb
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
    INSERT INTO occ.agents (id, namespace_id, name, service_principal_id, created_by, execution_mode)
    VALUES (agent_id, p_namespace, p_name, principal, p_actor, p_execution_mode);
    INSERT INTO occ.identities (id, kind, namespace_id, agent_id)
    VALUES (principal, 'service_principal', p_namespace, agent_id);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.create', 'agent', agent_id,
        jsonb_build_object('name', p_name, 'servicePrincipalId', principal,
            'executionMode', p_execution_mode));
    RETURN jsonb_build_object('id', agent_id, 'namespaceId', p_namespace, 'name', p_name,
        'servicePrincipalId', principal, 'executionMode', p_execution_mode);
END $$;
