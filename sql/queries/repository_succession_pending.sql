-- SPEC G15, G19: whether the Agent still has another revision's session `closing` for the
-- REF, which a standing revision waits on. $1 namespace id, $2 agent id, $3 revision id, $4 REF.
SELECT EXISTS (
    SELECT 1 FROM occ.repository_sessions
    WHERE namespace_id = $1 AND agent_id = $2 AND revision_id <> $3
      AND repository_ref::text = $4 AND phase = 'closing')
