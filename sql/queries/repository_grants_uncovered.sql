-- SPEC G19 *validate*: how many of the revision's bindings are no longer granted to its
-- Namespace at their scope (`write` covers `read`). $1 namespace id, $2 revision id.
SELECT count(*)
FROM occ.agent_revisions r
CROSS JOIN LATERAL jsonb_array_elements(r.repository_credentials -> 'bindings') b
WHERE r.namespace_id = $1 AND r.id = $2
  AND NOT EXISTS (
    SELECT 1 FROM occ.repository_grants g
    WHERE g.namespace_id = r.namespace_id
      AND g.repository_ref::text = b ->> 'repositoryRef'
      AND (g.scope = 'write' OR b ->> 'scope' = 'read'))
