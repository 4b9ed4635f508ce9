-- Marks every earlier revision of the Agent retired (R6, R7). $1 agent id, $2 revision number.
UPDATE occ.agent_revisions SET retired_at = clock_timestamp()
WHERE agent_id = $1 AND revision < $2 AND retired_at IS NULL
