-- Appends one audit event written by a reconciler inside its fenced transaction.
-- $1 installation, $2 namespace, $3 kind, $4 actor, $5 action, $6 resource kind,
-- $7 resource id, $8 outcome, $9 reason code, $10 work id, $11 details, $12 source,
-- $13 IAM driver id, $14 a denial's authorization request, $15 its decision's reason.
INSERT INTO occ.audit_events (installation_id, namespace_id, kind, actor_id, action,
                              resource_kind, resource_id, outcome, reason_code, work_id, details,
                              source, iam_driver_id, authorization_request, decision_reason)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
RETURNING id
