-- `admin agent show` names the Agent's execution mode (SPEC R1; null when not set), what each
-- revision pinned at admission and what withdrew from it: its Harness, version and execution
-- mode, its harness auth method, Sandbox Driver and facets (SPEC S2), credential sources (SPEC §13)
-- and withdrawal rows, its repository credentials (SPEC G8: the snapshot, null without), the
-- Agent's sandbox policy (SPEC S3) and its workspace setup (SPEC WS1,
-- WS4: its id and whether, when and by which revision it completed; null without one).
CREATE OR REPLACE FUNCTION occ.agent_show(p_namespace text, p_agent text) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    a occ.agents;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    SELECT * INTO a FROM occ.agents
    WHERE namespace_id = p_namespace AND (id = p_agent OR name = p_agent)
    ORDER BY (id = p_agent) DESC LIMIT 1;
    IF a.id IS NULL THEN
        RAISE EXCEPTION 'agent %/% does not exist', p_namespace, p_agent USING ERRCODE = 'no_data_found';
    END IF;
    RETURN jsonb_build_object(
        'id', a.id, 'namespaceId', a.namespace_id, 'name', a.name, 'status', a.status,
        'desiredRuntimeState', a.desired_runtime_state, 'activeRevisionId', a.active_revision_id,
        'servicePrincipalId', a.service_principal_id, 'executionMode', a.execution_mode,
        'sandboxPolicy', (
            SELECT jsonb_build_object('generation', p.generation, 'state', p.state,
                                      'reasonCode', p.reason_code, 'egress', p.egress)
            FROM occ.agent_sandbox_policies p WHERE p.agent_id = a.id),
        'workspaceSetup', (
            SELECT jsonb_build_object('id', w.id, 'completed', w.completed_at IS NOT NULL,
                       'completedAt', to_char(w.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                       'completedRevisionId', w.completed_revision_id)
            FROM occ.workspace_setups w WHERE w.agent_id = a.id),
        'revisions', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'id', s.revision_id, 'revision', s.revision, 'state', s.state,
                'reasonCode', s.reason_code, 'error', s.error, 'warnings', s.warnings,
                'attempts', s.attempts, 'createdAt', s.created_at, 'updatedAt', s.updated_at,
                'completedAt', s.completed_at, 'retiredAt', s.retired_at,
                'harnessId', r.harness_id, 'harnessVersion', r.harness_version,
                'executionMode', r.execution_mode,
                'harnessAuthMethod', r.harness_auth ->> 'method',
                'sandboxDriverId', r.sandbox_driver_id, 'sandboxFacets', r.sandbox_facets,
                'repositoryCredentials', r.repository_credentials,
                'credentialSources', (
                    SELECT coalesce(jsonb_agg(jsonb_build_object('sourceId', e ->> 'sourceId',
                                                                 'kind', e ->> 'kind')
                                              ORDER BY n), '[]'::jsonb)
                    FROM jsonb_array_elements(r.credential_sources) WITH ORDINALITY AS x(e, n)),
                'withdrawals', (
                    SELECT coalesce(jsonb_agg(jsonb_build_object(
                               'sourceId', w.source_id, 'state', w.state,
                               'requestedBy', w.requested_by, 'lastReason', w.last_reason)
                               ORDER BY w.source_id), '[]'::jsonb)
                    FROM occ.credential_withdrawals w
                    WHERE w.namespace_id = r.namespace_id AND w.revision_id = r.id))
                ORDER BY s.revision)
            FROM occ.revision_status s
            JOIN occ.agent_revisions r ON r.id = s.revision_id
            WHERE s.agent_id = a.id), '[]'::jsonb));
END $$;
