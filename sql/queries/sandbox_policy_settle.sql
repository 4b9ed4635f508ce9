-- Inside the fenced finalizing transaction (SPEC S3): the policy's terminal state and code,
-- only while its generation is still the stored one. $1 agent id, $2 generation,
-- $3 state (applied | failed), $4 reason code.
UPDATE occ.agent_sandbox_policies
SET state = $3, reason_code = $4, updated_at = clock_timestamp()
WHERE agent_id = $1 AND generation = $2
