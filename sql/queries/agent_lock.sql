-- Locks one Agent for a finalizing transaction and reads what its outcome depends on.
-- $1 namespace id, $2 agent id.
SELECT desired_runtime_state, service_principal_id, active_revision_id
FROM occ.agents
WHERE namespace_id = $1 AND id = $2
FOR UPDATE
