-- SPEC G15, G19 *authorize*: the Agent's standing approval of a REF. $1 namespace id,
-- $2 agent id, $3 REF.
SELECT id::text, generation, scope_fingerprint
FROM occ.repository_standing_approvals
WHERE namespace_id = $1 AND agent_id = $2 AND repository_ref::text = $3
