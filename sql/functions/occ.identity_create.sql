-- Creates a user, or the service principal of an existing Agent (NS and AGENT by id; NS may
-- be the live name). Installation `administer` required.
CREATE OR REPLACE FUNCTION occ.identity_create(
    p_actor text, p_id text, p_service_principal boolean DEFAULT false,
    p_namespace text DEFAULT NULL, p_agent text DEFAULT NULL
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    ns text;
    existing text;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'create identities');
    IF NOT occ.is_ident(p_id) THEN
        RAISE EXCEPTION 'invalid identity id %: lowercase letters, digits, - and _', p_id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM occ.identities WHERE id = p_id) THEN
        RAISE EXCEPTION 'identity % already exists', p_id USING ERRCODE = 'unique_violation';
    END IF;
    IF p_service_principal THEN
        IF p_namespace IS NULL OR p_agent IS NULL THEN
            RAISE EXCEPTION 'a service principal needs its Namespace and Agent'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        ns := occ.resolve_namespace(p_namespace);
        IF NOT EXISTS (SELECT 1 FROM occ.agents WHERE namespace_id = ns AND id = p_agent) THEN
            RAISE EXCEPTION 'no Agent % in Namespace %', p_agent, p_namespace
                USING ERRCODE = 'no_data_found';
        END IF;
        SELECT id INTO existing FROM occ.identities
        WHERE kind = 'service_principal' AND namespace_id = ns AND agent_id = p_agent;
        IF existing IS NOT NULL THEN
            RAISE EXCEPTION 'Agent % already has service principal %', p_agent, existing
                USING ERRCODE = 'unique_violation';
        END IF;
        INSERT INTO occ.identities (id, kind, namespace_id, agent_id)
        VALUES (p_id, 'service_principal', ns, p_agent);
    ELSE
        IF p_namespace IS NOT NULL OR p_agent IS NOT NULL THEN
            RAISE EXCEPTION 'a user belongs to no Namespace or Agent (use --service-principal)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        INSERT INTO occ.identities (id, kind) VALUES (p_id, 'user');
    END IF;
    PERFORM occ.audit_admission(p_actor, 'openclaw.identities.create', 'identity', p_id, ns, NULL,
        jsonb_build_object('kind', CASE WHEN p_service_principal THEN 'service_principal' ELSE 'user' END,
                           'agentId', p_agent));
    RETURN (SELECT jsonb_build_object('id', id, 'kind', kind, 'namespaceId', namespace_id,
                                      'agentId', agent_id)
            FROM occ.identities WHERE id = p_id);
END $$;
