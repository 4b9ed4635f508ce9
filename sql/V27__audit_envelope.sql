-- The audit event's envelope as the seed writes it (3021-3046, 3812-3851): where it comes
-- from (`source`), the IAM driver that decided its authorizations (`iam_driver_id`), and for
-- an authorization denial its request and the decision's reason at the top level
-- (`authorization_request`, `decision_reason`), not only inside `details`. Earlier events keep
-- `occ` and no driver id.
ALTER TABLE occ.audit_events
    ADD COLUMN source text NOT NULL DEFAULT 'occ'
        CONSTRAINT audit_events_source_check CHECK (source ~ '^[a-z][a-z0-9_-]{0,62}$'),
    ADD COLUMN iam_driver_id text
        CONSTRAINT audit_events_iam_driver_id_check CHECK (occ.is_ident(iam_driver_id)),
    ADD COLUMN authorization_request jsonb
        CONSTRAINT audit_events_authorization_request_check
        CHECK (jsonb_typeof(authorization_request) = 'object'),
    ADD COLUMN decision_reason text
        CONSTRAINT audit_events_decision_reason_check
        CHECK (decision_reason ~ '^[A-Z][A-Z0-9_]*$');
