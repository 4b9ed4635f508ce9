-- Operator reads: the Agents of the Namespace with id $1, each with its latest revision's
-- deployment status (occ.revision_status, R12).
SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', a.id, 'name', a.name, 'status', a.status,
        'desiredRuntimeState', a.desired_runtime_state,
        'activeRevisionId', a.active_revision_id,
        'servicePrincipalId', a.service_principal_id,
        'latestRevision', latest.revision, 'latestState', latest.state,
        'latestReasonCode', latest.reason_code,
        'createdAt', to_char(a.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
    ORDER BY a.name), '[]')
FROM occ.agents a
LEFT JOIN LATERAL (
    SELECT s.revision, s.state, s.reason_code FROM occ.revision_status s
    WHERE s.agent_id = a.id ORDER BY s.revision DESC LIMIT 1) latest ON true
WHERE a.namespace_id = $1
