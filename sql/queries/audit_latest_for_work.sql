-- The latest audit event of one work: pending observations are audited once per distinct
-- observation, decided against what is durably recorded. $1 work id.
SELECT action, outcome, reason_code, details
FROM occ.audit_events
WHERE work_id = $1
ORDER BY id DESC
LIMIT 1
