-- What a provisioning Namespace still waits for: the pending reason its ensure work last
-- audited, and whether that reason is the tenant RoleBinding (SPEC N3); no row when the
-- Namespace is not provisioning. $1 Namespace id.
SELECT a.reason, a.reason = 'NAMESPACE_ROLEBINDING_PENDING' AS rolebinding_missing
FROM occ.namespaces n
LEFT JOIN LATERAL (
    SELECT details ->> 'pendingReason' AS reason FROM occ.audit_events
    WHERE namespace_id = n.id AND action = 'openclaw.namespaces.lifecycle.ensure'
    ORDER BY id DESC LIMIT 1
) a ON true
WHERE n.id = $1 AND n.status = 'provisioning'
