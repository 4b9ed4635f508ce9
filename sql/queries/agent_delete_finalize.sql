-- The claim-fenced database finalizer of an Agent deletion (A2): API keys, IAM references
-- naming the Agent or its service principal, then the Agent itself, whose deletion cascades
-- to its revisions, its service principal and every work row of the Agent (the current one
-- included). Returns how many Agents were removed.
-- $1 namespace id, $2 agent id, $3 service principal id.
WITH keys AS (
    DELETE FROM occ.api_keys WHERE service_principal_id = $3
), bindings AS (
    DELETE FROM occ.iam_bindings
    WHERE principal_id = $3
       OR (scope_kind = 'resource' AND resource_kind = 'agent' AND namespace_id = $1 AND resource_id = $2)
), restrictions AS (
    DELETE FROM occ.iam_restrictions
    WHERE principal_id = $3
       OR (scope_kind = 'resource' AND resource_kind = 'agent' AND namespace_id = $1 AND resource_id = $2)
), agent AS (
    DELETE FROM occ.agents WHERE namespace_id = $1 AND id = $2 AND status = 'deleting' RETURNING id
)
SELECT count(*) FROM agent
