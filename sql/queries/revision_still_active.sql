-- SPEC Z2, in a finalizing transaction: locks the revision's Agent and answers whether it
-- still points at the revision with the revision's principal and still runs. No row: the
-- Agent is gone. $1 namespace id, $2 revision id.
SELECT a.active_revision_id = r.id
       AND a.service_principal_id = r.service_principal_id
       AND a.desired_runtime_state = 'running'
FROM occ.agent_revisions r
JOIN occ.agents a ON a.id = r.agent_id AND a.namespace_id = r.namespace_id
WHERE r.namespace_id = $1 AND r.id = $2
FOR UPDATE OF a
