-- Compare-and-set of the active pointer (R6): from the expected previous value to this
-- revision, only while the Agent still wants to run. Zero rows: the race was lost.
-- $1 namespace id, $2 agent id, $3 revision id, $4 expected previous (nullable).
UPDATE occ.agents SET active_revision_id = $3, updated_at = clock_timestamp()
WHERE namespace_id = $1 AND id = $2 AND active_revision_id IS NOT DISTINCT FROM $4::text
  AND desired_runtime_state = 'running' AND status = 'active'
RETURNING id
