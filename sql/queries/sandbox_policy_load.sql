-- An Agent's sandbox policy as a pass sees it (SPEC S3): the stored generation and egress,
-- and whether the Agent is being deleted; no row when it has no policy.
-- $1 namespace id, $2 agent id.
SELECT p.generation, p.egress, a.status = 'deleting' AS deleting
FROM occ.agent_sandbox_policies p
JOIN occ.agents a ON a.id = p.agent_id
WHERE p.namespace_id = $1 AND p.agent_id = $2
