-- SPEC G13: whether a session of the Agent is not yet `disposed` (its deletion waits).
-- $1 namespace id, $2 agent id.
SELECT EXISTS (
    SELECT 1 FROM occ.repository_sessions
    WHERE namespace_id = $1 AND agent_id = $2 AND phase <> 'disposed')
