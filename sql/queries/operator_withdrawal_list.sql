-- Operator reads (SPEC §13): the credential withdrawal rows of the Namespace with id $1, by
-- Agent name, revision number and source, each with its Agent's name and revision number;
-- only the Agent $2 (id or name) when given, and no row at all when $2 names no Agent of the
-- Namespace.
WITH agent AS (
    SELECT a.id FROM occ.agents a
    WHERE a.namespace_id = $1 AND (a.id = $2::text OR a.name = $2::text)
    ORDER BY a.id = $2::text DESC LIMIT 1)
SELECT coalesce(jsonb_agg(occ.credential_withdrawal_json(w)
                              || jsonb_build_object('agent', a.name, 'revision', r.revision)
                          ORDER BY a.name, r.revision, w.source_id), '[]')
FROM occ.credential_withdrawals w
JOIN occ.agents a ON a.id = w.agent_id
JOIN occ.agent_revisions r ON r.id = w.revision_id
WHERE w.namespace_id = $1 AND ($2::text IS NULL OR w.agent_id = (SELECT id FROM agent))
HAVING $2::text IS NULL OR EXISTS (SELECT 1 FROM agent)
