-- A workspace setup as `admin agent workspace-setup show` and `admin agent show` print it
-- (SPEC WS1, WS4): the document only when asked for.
CREATE OR REPLACE FUNCTION occ.workspace_setup_json(s occ.workspace_setups, p_document boolean)
RETURNS jsonb LANGUAGE sql STABLE
    RETURN CASE WHEN s.id IS NOT NULL THEN
        jsonb_build_object(
            'agentId', s.agent_id, 'namespaceId', s.namespace_id, 'id', s.id,
            'completed', s.completed_at IS NOT NULL,
            'completedAt', to_char(s.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'completedRevisionId', s.completed_revision_id,
            'createdBy', s.created_by,
            'createdAt', to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
        || CASE WHEN p_document THEN jsonb_build_object('document', s.document) ELSE '{}'::jsonb END
    END;
