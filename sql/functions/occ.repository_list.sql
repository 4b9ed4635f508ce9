-- SPEC G8: `admin repository list NS [AGENT]`: the Namespace's grants and its Agents' standing
-- approvals (of the one Agent when named), each in REF order. A read, like `admin agent show`.
CREATE OR REPLACE FUNCTION occ.repository_list(p_namespace text, p_agent text DEFAULT NULL)
RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    ns text := occ.resolve_namespace(p_namespace);
    agent text;
BEGIN
    IF p_agent IS NOT NULL THEN
        SELECT id INTO agent FROM occ.agents
        WHERE namespace_id = ns AND (id = p_agent OR name = p_agent)
        ORDER BY (id = p_agent) DESC LIMIT 1;
        IF agent IS NULL THEN
            RAISE EXCEPTION 'agent %/% does not exist', ns, p_agent USING ERRCODE = 'no_data_found';
        END IF;
    END IF;
    RETURN jsonb_build_object('namespaceId', ns,
        'grants', coalesce((
            SELECT jsonb_agg(jsonb_build_object('repositoryRef', g.repository_ref,
                       'scope', g.scope, 'createdBy', g.created_by,
                       'createdAt', to_char(g.created_at AT TIME ZONE 'UTC',
                                            'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
                   ORDER BY g.repository_ref)
            FROM occ.repository_grants g WHERE g.namespace_id = ns), '[]'::jsonb),
        'approvals', coalesce((
            SELECT jsonb_agg(occ.repository_approval_json(s) || jsonb_build_object('agent', a.name)
                   ORDER BY a.name, s.repository_ref)
            FROM occ.repository_standing_approvals s
            JOIN occ.agents a ON a.id = s.agent_id
            WHERE s.namespace_id = ns AND (agent IS NULL OR s.agent_id = agent)), '[]'::jsonb));
END $$;
