-- SPEC WS4, in the fenced transaction of an activation: the Agent's incomplete workspace
-- setup current at this commit, by its id, is completed by this revision on the database
-- clock, only while the Agent still points at the revision with the revision's principal.
-- $1 namespace id, $2 agent id, $3 revision id.
UPDATE occ.workspace_setups s
SET completed_at = clock_timestamp(), completed_revision_id = $3
WHERE s.namespace_id = $1 AND s.agent_id = $2 AND s.completed_at IS NULL
  AND EXISTS (
      SELECT 1 FROM occ.agents a JOIN occ.agent_revisions r ON r.id = $3
      WHERE a.namespace_id = $1 AND a.id = $2 AND a.active_revision_id = $3
        AND r.agent_id = a.id AND r.service_principal_id = a.service_principal_id)
RETURNING s.id
