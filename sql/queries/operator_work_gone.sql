-- Operator reads: the deletion of the Agent whose work rows went with it (A2 removes an
-- Agent's work with the Agent). $1 the Agent id of an `agent:` key, $2 the revision id of an
-- `agent_revision:` key (its Agent found from the deployment's admission audit). No row when
-- the Agent exists or no completed deletion of it was audited.
WITH agent AS (
    SELECT coalesce($1::text,
        (SELECT details ->> 'agentId' FROM occ.audit_events
         WHERE resource_kind = 'agent_revision' AND resource_id = $2::text
         ORDER BY id DESC LIMIT 1)) AS id
)
SELECT agent.id, coalesce(n.name, e.namespace_id), e.namespace_id,
       to_char(e.occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
FROM agent
JOIN occ.audit_events e ON e.resource_kind = 'agent' AND e.resource_id = agent.id
    AND e.action = 'openclaw.agents.lifecycle.delete' AND e.outcome = 'success'
LEFT JOIN occ.namespaces_all n ON n.id = e.namespace_id
WHERE NOT EXISTS (SELECT 1 FROM occ.agents WHERE id = agent.id)
ORDER BY e.id DESC
LIMIT 1
