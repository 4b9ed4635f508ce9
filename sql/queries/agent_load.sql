-- One Agent with its Namespace's status, as a reconciler sees it right now.
-- $1 namespace id, $2 agent id.
SELECT a.id, a.namespace_id, a.status, a.desired_runtime_state, a.active_revision_id,
       a.service_principal_id, n.status AS namespace_status
FROM occ.agents a JOIN occ.namespaces_all n ON n.id = a.namespace_id
WHERE a.namespace_id = $1 AND a.id = $2
