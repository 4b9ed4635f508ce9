-- SPEC G13: a settled repository cleanup makes the Agent's deletion, waiting on it, due now
-- rather than after the cleanup interval. $1 namespace id, $2 agent id.
UPDATE occ.work
SET available_at = clock_timestamp()
WHERE namespace_id = $1 AND agent_id = $2 AND agent_target = 'deleted' AND state = 'queued'
  AND available_at > clock_timestamp()
  AND occ.work_wake()
