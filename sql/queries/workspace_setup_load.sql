-- The Agent's workspace setup as a revision pass reads it (SPEC WS2, WS3): its id and
-- document, whether or not it completed. $1 namespace id, $2 agent id.
SELECT id, document FROM occ.workspace_setups WHERE namespace_id = $1 AND agent_id = $2
