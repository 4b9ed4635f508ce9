-- SPEC G8, G19: `admin repository sessions NS [AGENT]`: each session of the Namespace's
-- revisions (of the one Agent when named): its Agent, revision, REF, phase, session id and
-- update time, newest first. A read, like `admin agent show`; the material is not shown.
CREATE OR REPLACE FUNCTION occ.repository_sessions(p_namespace text, p_agent text DEFAULT NULL)
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
    RETURN coalesce((
        SELECT jsonb_agg(jsonb_build_object('agentId', s.agent_id, 'agent', a.name,
                   'revisionId', s.revision_id, 'revision', r.revision,
                   'repositoryRef', s.repository_ref, 'phase', s.phase,
                   'sessionId', s.session_id, 'admissionId', s.admission_id,
                   'updatedAt', to_char(s.updated_at AT TIME ZONE 'UTC',
                                        'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
               ORDER BY s.updated_at DESC, s.admission_id)
        FROM occ.repository_sessions s
        JOIN occ.agents a ON a.id = s.agent_id
        JOIN occ.agent_revisions r ON r.id = s.revision_id
        WHERE s.namespace_id = ns AND (agent IS NULL OR s.agent_id = agent)), '[]'::jsonb);
END $$;
