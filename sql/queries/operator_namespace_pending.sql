-- What a provisioning Namespace still waits for: the pending reason its ensure work last
-- audited (NULL when none). $1 Namespace id.
SELECT details ->> 'pendingReason' FROM occ.audit_events
WHERE namespace_id = $1 AND action = 'openclaw.namespaces.lifecycle.ensure'
ORDER BY id DESC LIMIT 1
