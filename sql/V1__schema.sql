-- occ-worker schema: every entity of SPEC section 1. Forward-only; never edit once landed.
-- Shapes are enforced here so the worker trusts persisted structure (SPEC Q2, R1).

CREATE SCHEMA IF NOT EXISTS occ;

-- Identifiers are short, lowercase and safe to embed in idempotency keys and resource names.
CREATE FUNCTION occ.is_ident(value text) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN value ~ '^[a-z0-9][a-z0-9_-]{0,62}$';

CREATE TABLE occ.installation (
    id          text CHECK (occ.is_ident(id)) PRIMARY KEY,
    singleton   boolean NOT NULL DEFAULT true UNIQUE CHECK (singleton),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE occ.namespaces_all (
    id                  text CHECK (occ.is_ident(id)) PRIMARY KEY,
    name                text CHECK (occ.is_ident(name)) NOT NULL,
    status              text NOT NULL CHECK (status IN ('provisioning', 'ready', 'failed', 'deleting')),
    existing_namespace  text NULL CHECK (existing_namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    created_by          text NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    deleted_at          timestamptz NULL,
    CHECK (deleted_at IS NULL OR status = 'deleting')
);
CREATE UNIQUE INDEX namespaces_live_name ON occ.namespaces_all (name) WHERE deleted_at IS NULL;

-- Public reads never see tombstones.
CREATE VIEW occ.namespaces AS
    SELECT id, name, status, existing_namespace, created_by, created_at, updated_at
    FROM occ.namespaces_all WHERE deleted_at IS NULL;

CREATE TABLE occ.identities (
    id            text CHECK (occ.is_ident(id)) PRIMARY KEY,
    kind          text NOT NULL CHECK (kind IN ('user', 'service_principal')),
    namespace_id  text CHECK (occ.is_ident(namespace_id)) NULL,
    agent_id      text CHECK (occ.is_ident(agent_id)) NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((kind = 'user' AND namespace_id IS NULL AND agent_id IS NULL)
        OR (kind = 'service_principal' AND namespace_id IS NOT NULL AND agent_id IS NOT NULL))
);
CREATE UNIQUE INDEX identities_one_principal_per_agent
    ON occ.identities (namespace_id, agent_id) WHERE kind = 'service_principal';

CREATE TABLE occ.agents (
    id                     text CHECK (occ.is_ident(id)) PRIMARY KEY,
    namespace_id           text CHECK (occ.is_ident(namespace_id)) NOT NULL REFERENCES occ.namespaces_all (id),
    name                   text CHECK (occ.is_ident(name)) NOT NULL,
    status                 text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'deleting')),
    desired_runtime_state  text NOT NULL DEFAULT 'running' CHECK (desired_runtime_state IN ('running', 'stopped')),
    active_revision_id     text CHECK (occ.is_ident(active_revision_id)) NULL,
    service_principal_id   text CHECK (occ.is_ident(service_principal_id)) NOT NULL UNIQUE,
    created_by             text NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (namespace_id, id),
    UNIQUE (namespace_id, name),
    CHECK (status = 'active' OR desired_runtime_state = 'stopped')
);

-- A service principal names its Agent (checked at commit so admission can insert both in one
-- transaction) and goes with it. The Agent keeps `service_principal_id` as a stable id with no
-- foreign key: revoking the principal is allowed (SPEC §1), and every later deployment pass
-- then fails `INVALID_AGENT_PRINCIPAL` (R2).
ALTER TABLE occ.identities ADD CONSTRAINT identities_agent_fk
    FOREIGN KEY (namespace_id, agent_id) REFERENCES occ.agents (namespace_id, id)
    ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;

CREATE TABLE occ.configurations (
    namespace_id  text CHECK (occ.is_ident(namespace_id)) NOT NULL REFERENCES occ.namespaces_all (id),
    id            text CHECK (occ.is_ident(id)) NOT NULL,
    generation    integer NOT NULL CHECK (generation > 0),
    document      jsonb NOT NULL CHECK (jsonb_typeof(document) = 'object'),
    updated_by    text NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (namespace_id, id)
);

CREATE TABLE occ.secrets (
    namespace_id  text CHECK (occ.is_ident(namespace_id)) NOT NULL REFERENCES occ.namespaces_all (id),
    id            text CHECK (occ.is_ident(id)) NOT NULL,
    -- A backend reference (NAMESPACE/NAME/KEY), never a value.
    backend_ref   text NOT NULL CHECK (backend_ref ~ '^[a-z0-9][-a-z0-9]*/[a-z0-9][-a-z0-9.]*/[-._a-zA-Z0-9]+$'),
    created_by    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (namespace_id, id)
);

-- Managed accounts a revision's harness auth can name (SPEC R2).
CREATE TABLE occ.service_accounts (
    namespace_id       text CHECK (occ.is_ident(namespace_id)) NOT NULL REFERENCES occ.namespaces_all (id),
    id                 text CHECK (occ.is_ident(id)) NOT NULL,
    access_token_ref   text NOT NULL CHECK (length(access_token_ref) BETWEEN 1 AND 253),
    backend_id         text CHECK (occ.is_ident(backend_id)) NOT NULL,
    backend_available  boolean NOT NULL DEFAULT true,
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (namespace_id, id)
);

CREATE TABLE occ.agent_revisions (
    id                        text CHECK (occ.is_ident(id)) PRIMARY KEY,
    namespace_id              text CHECK (occ.is_ident(namespace_id)) NOT NULL,
    agent_id                  text CHECK (occ.is_ident(agent_id)) NOT NULL,
    revision                  integer NOT NULL CHECK (revision > 0),
    actor_id                  text NOT NULL,
    service_principal_id      text CHECK (occ.is_ident(service_principal_id)) NOT NULL,
    configuration_id          text CHECK (occ.is_ident(configuration_id)) NOT NULL,
    configuration_generation  integer NOT NULL CHECK (configuration_generation > 0),
    document                  jsonb NOT NULL CHECK (jsonb_typeof(document) = 'object'),
    harness_id                text NOT NULL CHECK (harness_id IN ('codex', 'openclaw')),
    harness_version           text NOT NULL CHECK (harness_version ~ '^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$'),
    harness_mode              text NOT NULL CHECK (harness_mode IN ('dedicated', 'embedded')),
    execution_mode            text NOT NULL CHECK (execution_mode IN ('dedicated', 'embedded')),
    compute_id                text NOT NULL CHECK (compute_id ~ '^[a-z][a-z0-9-]{0,62}$'),
    compute_implementation    text NOT NULL CHECK (compute_implementation IN ('docker', 'kubernetes', 'scripted')),
    -- {"method":"secret","source":{"namespaceId","id"}} or
    -- {"method":"service_account","source":{"namespaceId","id"},"accessTokenRef","backendId"}.
    harness_auth              jsonb NULL CHECK (harness_auth IS NULL OR (
        jsonb_typeof(harness_auth) = 'object'
        AND harness_auth->>'method' IN ('secret', 'service_account')
        AND jsonb_typeof(harness_auth->'source') = 'object'
        AND harness_auth->'source'->>'namespaceId' IS NOT NULL
        AND harness_auth->'source'->>'id' IS NOT NULL
        AND (harness_auth->>'method' = 'secret' OR (
            harness_auth->>'accessTokenRef' IS NOT NULL AND harness_auth->>'backendId' IS NOT NULL)))),
    -- {"ENV_NAME": {"namespaceId", "id"}}: environment names to Secret references.
    secret_bindings           jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(secret_bindings) = 'object'),
    -- [{"id": "plugin-id"}]: admitted plugins; warnings may only name these.
    plugins                   jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(plugins) = 'array'),
    created_at                timestamptz NOT NULL DEFAULT clock_timestamp(),
    retired_at                timestamptz NULL,
    UNIQUE (agent_id, revision),
    UNIQUE (id, agent_id, namespace_id),
    FOREIGN KEY (namespace_id, agent_id) REFERENCES occ.agents (namespace_id, id) ON DELETE CASCADE
);

ALTER TABLE occ.agents ADD CONSTRAINT agents_active_revision_fk
    FOREIGN KEY (active_revision_id, id, namespace_id)
    REFERENCES occ.agent_revisions (id, agent_id, namespace_id)
    DEFERRABLE INITIALLY DEFERRED;

CREATE TABLE occ.api_keys (
    id                    text CHECK (occ.is_ident(id)) PRIMARY KEY,
    service_principal_id  text CHECK (occ.is_ident(service_principal_id)) NOT NULL REFERENCES occ.identities (id) ON DELETE CASCADE,
    key_hash              text NOT NULL CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    created_at            timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- IAM: roles are sets of actions over resource kinds; bindings grant a role to a principal on
-- a scope; restrictions deny actions on a scope and win over every binding.
CREATE TABLE occ.iam_roles (
    id              text CHECK (occ.is_ident(id)) PRIMARY KEY,
    actions         text[] NOT NULL CHECK (cardinality(actions) > 0
        AND actions <@ ARRAY['create', 'delete', 'administer', 'operate', 'deploy', 'read']),
    resource_kinds  text[] NOT NULL CHECK (cardinality(resource_kinds) > 0
        AND resource_kinds <@ ARRAY['installation', 'namespace', 'agent', 'configuration', 'secret', 'service_account']),
    builtin         boolean NOT NULL DEFAULT false
);

CREATE TABLE occ.iam_bindings (
    id             bigserial PRIMARY KEY,
    -- NULL principal: the binding names a group instead (group_id, below).
    principal_id   text CHECK (occ.is_ident(principal_id)) NULL REFERENCES occ.identities (id) ON DELETE CASCADE,
    role_id        text CHECK (occ.is_ident(role_id)) NOT NULL REFERENCES occ.iam_roles (id),
    scope_kind     text NOT NULL CHECK (scope_kind IN ('installation', 'namespace', 'resource')),
    namespace_id   text CHECK (occ.is_ident(namespace_id)) NULL,
    resource_kind  text NULL CHECK (resource_kind IN ('agent', 'configuration', 'secret', 'service_account')),
    resource_id    text CHECK (occ.is_ident(resource_id)) NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((scope_kind = 'installation' AND namespace_id IS NULL AND resource_kind IS NULL AND resource_id IS NULL)
        OR (scope_kind = 'namespace' AND namespace_id IS NOT NULL AND resource_kind IS NULL AND resource_id IS NULL)
        OR (scope_kind = 'resource' AND namespace_id IS NOT NULL AND resource_kind IS NOT NULL AND resource_id IS NOT NULL))
);
CREATE TABLE occ.iam_restrictions (
    id             bigserial PRIMARY KEY,
    -- NULL principal: the restriction applies to every principal.
    principal_id   text CHECK (occ.is_ident(principal_id)) NULL REFERENCES occ.identities (id) ON DELETE CASCADE,
    actions        text[] NOT NULL CHECK (cardinality(actions) > 0
        AND actions <@ ARRAY['create', 'delete', 'administer', 'operate', 'deploy', 'read']),
    scope_kind     text NOT NULL CHECK (scope_kind IN ('installation', 'namespace', 'resource')),
    namespace_id   text CHECK (occ.is_ident(namespace_id)) NULL,
    resource_kind  text NULL CHECK (resource_kind IN ('namespace', 'agent', 'configuration', 'secret', 'service_account')),
    resource_id    text CHECK (occ.is_ident(resource_id)) NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((scope_kind = 'installation' AND namespace_id IS NULL AND resource_kind IS NULL AND resource_id IS NULL)
        OR (scope_kind = 'namespace' AND namespace_id IS NOT NULL AND resource_kind IS NULL AND resource_id IS NULL)
        OR (scope_kind = 'resource' AND namespace_id IS NOT NULL AND resource_kind IS NOT NULL AND resource_id IS NOT NULL))
);

-- IAM groups: a binding or restriction may name a group instead of one identity; it then
-- applies to every member. A binding names exactly one identity or group; a restriction
-- names an identity, a group, or neither (everyone). Removing an identity removes its
-- memberships; removing a group removes its bindings and restrictions.
CREATE TABLE occ.iam_groups (
    id          text CHECK (occ.is_ident(id)) PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE occ.iam_group_members (
    group_id     text NOT NULL REFERENCES occ.iam_groups (id) ON DELETE CASCADE,
    identity_id  text NOT NULL REFERENCES occ.identities (id) ON DELETE CASCADE,
    added_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (group_id, identity_id)
);
CREATE INDEX iam_group_members_by_identity ON occ.iam_group_members (identity_id);

ALTER TABLE occ.iam_bindings
    ADD COLUMN group_id text NULL REFERENCES occ.iam_groups (id) ON DELETE CASCADE,
    ADD CONSTRAINT iam_bindings_one_principal CHECK ((principal_id IS NULL) <> (group_id IS NULL));
CREATE UNIQUE INDEX iam_bindings_unique ON occ.iam_bindings
    (coalesce(principal_id, ''), coalesce(group_id, ''), role_id, scope_kind,
     coalesce(namespace_id, ''), coalesce(resource_kind, ''), coalesce(resource_id, ''));
CREATE INDEX iam_bindings_by_group ON occ.iam_bindings (group_id) WHERE group_id IS NOT NULL;

ALTER TABLE occ.iam_restrictions
    ADD COLUMN group_id text NULL REFERENCES occ.iam_groups (id) ON DELETE CASCADE,
    ADD CONSTRAINT iam_restrictions_at_most_one_principal CHECK (principal_id IS NULL OR group_id IS NULL);

-- The durable queue (SPEC Q1-Q13).
CREATE TABLE occ.work (
    id                bigserial PRIMARY KEY,
    idempotency_key   text NOT NULL UNIQUE,
    namespace_id      text CHECK (occ.is_ident(namespace_id)) NOT NULL REFERENCES occ.namespaces_all (id),
    agent_id          text CHECK (occ.is_ident(agent_id)) NULL,
    revision_id       text CHECK (occ.is_ident(revision_id)) NULL,
    namespace_target  text NULL CHECK (namespace_target IN ('ready', 'deleted')),
    agent_target      text NULL CHECK (agent_target IN ('stopped', 'deleted')),
    actor_id          text NOT NULL CHECK (length(actor_id) > 0),
    state             text NOT NULL DEFAULT 'queued'
        CHECK (state IN ('queued', 'claimed', 'succeeded', 'failed_permanent')),
    attempt_count     integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    available_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    claim_token       uuid NULL,
    claimed_at        timestamptz NULL,
    lease_expires_at  timestamptz NULL,
    reason_code       text NULL CHECK (reason_code ~ '^[A-Z][A-Z0-9_]*$'),
    result_data       jsonb NULL CHECK (result_data IS NULL OR jsonb_typeof(result_data) = 'object'),
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at      timestamptz NULL,
    -- Lanes (Q4): Namespace lifecycle serializes per Namespace, all Agent work per Agent.
    lane              text GENERATED ALWAYS AS (
        CASE WHEN agent_id IS NULL THEN 'namespace:' || namespace_id ELSE 'agent:' || agent_id END) STORED,
    operation         text GENERATED ALWAYS AS (
        CASE
            WHEN namespace_target = 'ready' THEN 'namespace_ensure'
            WHEN namespace_target = 'deleted' THEN 'namespace_delete'
            WHEN agent_target = 'stopped' THEN 'agent_stop'
            WHEN agent_target = 'deleted' THEN 'agent_delete'
            WHEN idempotency_key LIKE 'agent_revision:%:maintenance:%' THEN 'revision_maintenance'
            ELSE 'revision_reconcile'
        END) STORED,
    -- Q2: exactly one of three shapes.
    CONSTRAINT work_shape CHECK (
        (namespace_target IS NOT NULL AND agent_id IS NULL AND agent_target IS NULL AND revision_id IS NULL)
        OR (agent_id IS NOT NULL AND agent_target IS NOT NULL AND namespace_target IS NULL AND revision_id IS NULL)
        OR (agent_id IS NOT NULL AND revision_id IS NOT NULL AND namespace_target IS NULL AND agent_target IS NULL)),
    -- Q3: the key names the exact target of its shape. NULL (a branch over a NULL column)
    -- counts as a mismatch, never as a pass.
    CONSTRAINT work_key CHECK (coalesce(
        (namespace_target = 'ready' AND idempotency_key = 'namespace:' || namespace_id || ':ensure')
        OR (namespace_target = 'deleted' AND idempotency_key ~ ('^namespace:' || namespace_id || ':delete(:[1-9][0-9]*)?$'))
        OR (agent_target = 'stopped' AND idempotency_key ~ ('^agent:' || agent_id || ':stop:[1-9][0-9]*$'))
        OR (agent_target = 'deleted' AND idempotency_key ~ ('^agent:' || agent_id || ':delete(:[1-9][0-9]*)?$'))
        OR (revision_id IS NOT NULL AND idempotency_key ~ ('^agent_revision:' || revision_id || ':(reconcile|maintenance:[0-9]+)$')),
        false)),
    -- Q1: a claim exists exactly while the row is claimed.
    -- Each column on its own: unclaimed work has none of them.
    CONSTRAINT work_claim CHECK (
        (state = 'claimed') = (claim_token IS NOT NULL)
        AND (state = 'claimed') = (lease_expires_at IS NOT NULL)
        AND (state = 'claimed') = (claimed_at IS NOT NULL)),
    -- Q11: only terminal work has an outcome and result data.
    CONSTRAINT work_result CHECK (
        (state IN ('succeeded', 'failed_permanent')) = (reason_code IS NOT NULL)
        AND (state IN ('succeeded', 'failed_permanent')) = (completed_at IS NOT NULL)
        AND (result_data IS NULL OR state IN ('succeeded', 'failed_permanent'))),
    CONSTRAINT work_claimed_attempt CHECK (state <> 'claimed' OR attempt_count > 0),
    FOREIGN KEY (namespace_id, agent_id) REFERENCES occ.agents (namespace_id, id) ON DELETE CASCADE,
    -- Q2: a revision must belong to the named Agent and Namespace.
    FOREIGN KEY (revision_id, agent_id, namespace_id)
        REFERENCES occ.agent_revisions (id, agent_id, namespace_id) ON DELETE CASCADE
);

-- Never two live claims in one lane, whatever process claims (Q4).
CREATE UNIQUE INDEX work_one_claim_per_lane ON occ.work (lane) WHERE state = 'claimed';
CREATE INDEX work_claimable ON occ.work (available_at, id) WHERE state = 'queued';
CREATE INDEX work_leases ON occ.work (lease_expires_at) WHERE state = 'claimed';
CREATE INDEX work_by_namespace ON occ.work (namespace_id, created_at);
CREATE INDEX work_by_agent ON occ.work (agent_id) WHERE agent_id IS NOT NULL;

CREATE TABLE occ.work_attempts (
    id        bigserial PRIMARY KEY,
    work_id   bigint NOT NULL REFERENCES occ.work (id) ON DELETE CASCADE,
    attempt   integer NOT NULL CHECK (attempt >= 0),
    code      text NOT NULL CHECK (code ~ '^[A-Z][A-Z0-9_]*$'),
    outcome   text NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'retry', 'deferred', 'lease_expired')),
    refusal   text NULL CHECK (refusal ~ '^[A-Z][A-Z0-9_]*$'),
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX work_attempts_by_work ON occ.work_attempts (work_id, id);

CREATE TABLE occ.audit_events (
    id               bigserial PRIMARY KEY,
    installation_id  text CHECK (occ.is_ident(installation_id)) NOT NULL REFERENCES occ.installation (id),
    namespace_id     text CHECK (occ.is_ident(namespace_id)) NULL,
    occurred_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind             text NOT NULL CHECK (kind IN ('mutation', 'authorization_denial')),
    actor_id         text NOT NULL,
    action           text NOT NULL CHECK (action ~ '^[a-z][a-z0-9_.]*$'),
    resource_kind    text NOT NULL CHECK (resource_kind IN ('installation', 'namespace', 'agent', 'agent_revision', 'configuration', 'secret', 'service_account', 'identity', 'iam_binding', 'iam_group', 'work')),
    resource_id      text NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('success', 'failure', 'denied')),
    reason_code      text NULL CHECK (reason_code ~ '^[A-Z][A-Z0-9_]*$'),
    work_id          bigint NULL,
    details          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(details) = 'object'),
    CHECK ((kind = 'authorization_denial') = (outcome = 'denied'))
);
CREATE INDEX audit_by_namespace ON occ.audit_events (namespace_id, id);
CREATE INDEX audit_by_work ON occ.audit_events (work_id) WHERE work_id IS NOT NULL;

CREATE FUNCTION occ.audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON occ.audit_events
    FOR EACH ROW EXECUTE FUNCTION occ.audit_append_only();

-- Q13: every change that can make work claimable wakes idle workers. A notification is
-- delivered at commit; identical ones in one transaction collapse into one.
CREATE FUNCTION occ.work_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'queued' OR (TG_OP = 'UPDATE' AND OLD.state = 'claimed') THEN
        PERFORM pg_notify('occ_work', '');
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER work_notify AFTER INSERT OR UPDATE OF state, available_at ON occ.work
    FOR EACH ROW EXECUTE FUNCTION occ.work_notify();

-- Built-in roles (SPEC section 1).
INSERT INTO occ.iam_roles (id, actions, resource_kinds, builtin) VALUES
    ('installation-admin', ARRAY['create', 'delete', 'administer', 'operate', 'deploy', 'read'],
        ARRAY['installation', 'namespace', 'agent', 'configuration', 'secret', 'service_account'], true),
    ('namespace-admin', ARRAY['create', 'delete', 'administer', 'operate', 'deploy', 'read'],
        ARRAY['namespace', 'agent', 'configuration', 'secret', 'service_account'], true),
    ('agent-operator', ARRAY['operate', 'deploy', 'read'],
        ARRAY['agent', 'configuration', 'secret'], true),
    ('viewer', ARRAY['read'],
        ARRAY['installation', 'namespace', 'agent', 'configuration', 'secret', 'service_account'], true);
