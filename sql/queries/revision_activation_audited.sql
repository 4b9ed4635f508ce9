-- Whether the activation of a revision was already audited (exactly one per revision).
-- $1 revision id.
SELECT EXISTS (SELECT 1 FROM occ.audit_events
               WHERE action = 'openclaw.agents.lifecycle.activate' AND resource_kind = 'agent_revision'
                 AND resource_id = $1)
