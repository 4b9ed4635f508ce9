-- SPEC §12, §13 (Data): the revision snapshot of credential sources, the `credential_source`
-- harness auth, the withdrawal rows and the withdrawal work kind, with the small predicates
-- every enqueue of a withdrawal shares (E15's "awaits replay" and "needs an attempt", E14's
-- runtime holders).

-- A revision's snapshot of the sources its runtime was admitted with (SPEC §13, 5399-5412):
-- `[{sourceId, credentialGatewayId | credentialProxyId, kind, driverId, backendRef, egress?}]`,
-- each source once, the harness source included.
CREATE FUNCTION occ.is_credential_snapshot(s jsonb, harness_auth jsonb) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    e jsonb;
    ids text[] := '{}';
BEGIN
    IF jsonb_typeof(s) IS DISTINCT FROM 'array' THEN
        RETURN false;
    END IF;
    FOR e IN SELECT value FROM jsonb_array_elements(s) LOOP
        IF NOT coalesce(
            jsonb_typeof(e) = 'object'
            AND e - 'sourceId' - 'credentialGatewayId' - 'credentialProxyId' - 'kind' - 'driverId'
                  - 'backendRef' - 'egress' = '{}'::jsonb
            AND jsonb_typeof(e -> 'sourceId') = 'string' AND occ.is_ident(e ->> 'sourceId')
            AND ((e ? 'credentialGatewayId') <> (e ? 'credentialProxyId'))
            AND jsonb_typeof(coalesce(e -> 'credentialGatewayId', e -> 'credentialProxyId')) = 'string'
            AND length(btrim(coalesce(e ->> 'credentialGatewayId', e ->> 'credentialProxyId'))) > 0
            AND e ->> 'kind' IN ('model_key', 'tool')
            AND jsonb_typeof(e -> 'driverId') = 'string'
            AND length(btrim(e ->> 'driverId')) > 0
            AND jsonb_typeof(e -> 'backendRef') = 'string'
            AND (e ->> 'backendRef') ~ '^[a-z0-9][-a-z0-9]*/[a-z0-9][-a-z0-9.]*/[-._a-zA-Z0-9]+$'
            AND (NOT e ? 'egress' OR jsonb_typeof(e -> 'egress') IN ('object', 'null')),
            false)
           OR (e ->> 'sourceId') = ANY (ids) THEN
            RETURN false;
        END IF;
        ids := ids || (e ->> 'sourceId');
    END LOOP;
    IF harness_auth ->> 'method' = 'credential_source' THEN
        RETURN EXISTS (SELECT 1 FROM jsonb_array_elements(s) x
                       WHERE x.value ->> 'sourceId' = harness_auth ->> 'sourceId'
                         AND x.value ->> 'kind' = 'model_key'
                         AND x.value ->> 'credentialGatewayId' = harness_auth ->> 'credentialGatewayId');
    END IF;
    RETURN true;
END $$;

ALTER TABLE occ.agent_revisions ADD COLUMN credential_sources jsonb NOT NULL DEFAULT '[]'::jsonb;
ALTER TABLE occ.agent_revisions ADD CONSTRAINT agent_revisions_credential_sources_check
    CHECK (occ.is_credential_snapshot(credential_sources, harness_auth));

-- `{method: credential_source, sourceId, credentialGatewayId}` beside the two earlier methods.
ALTER TABLE occ.agent_revisions DROP CONSTRAINT agent_revisions_harness_auth_check;
ALTER TABLE occ.agent_revisions ADD CONSTRAINT agent_revisions_harness_auth_check
    CHECK (harness_auth IS NULL OR coalesce(
        jsonb_typeof(harness_auth) = 'object'
        AND ((harness_auth ->> 'method' IN ('secret', 'service_account')
              AND jsonb_typeof(harness_auth -> 'source') = 'object'
              AND (harness_auth -> 'source' ->> 'namespaceId') IS NOT NULL
              AND (harness_auth -> 'source' ->> 'id') IS NOT NULL
              AND (harness_auth ->> 'method' = 'secret'
                   OR occ.is_service_account_harness_auth(harness_auth, backend_id)))
             OR (harness_auth ->> 'method' = 'credential_source'
                 AND harness_auth - 'method' - 'sourceId' - 'credentialGatewayId' = '{}'::jsonb
                 AND jsonb_typeof(harness_auth -> 'sourceId') = 'string'
                 AND occ.is_ident(harness_auth ->> 'sourceId')
                 AND jsonb_typeof(harness_auth -> 'credentialGatewayId') = 'string'
                 AND length(btrim(harness_auth ->> 'credentialGatewayId')) > 0)),
        false));

-- One row per (revision, source) an operator asked to withdraw (SPEC §13, 562-571,
-- 3400-3417), removed with its revision.
CREATE TABLE occ.credential_withdrawals (
    namespace_id  text NOT NULL CHECK (occ.is_ident(namespace_id)),
    agent_id      text NOT NULL CHECK (occ.is_ident(agent_id)),
    revision_id   text NOT NULL,
    source_id     text NOT NULL CHECK (occ.is_ident(source_id)),
    state         text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'revoked')),
    requested_by  text NOT NULL CHECK (length(requested_by) > 0),
    requested_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_reason   text NULL CHECK (last_reason ~ '^[A-Z][A-Z0-9_]*$'),
    last_at       timestamptz NULL,
    revoked_at    timestamptz NULL,
    PRIMARY KEY (namespace_id, revision_id, source_id),
    FOREIGN KEY (revision_id, agent_id, namespace_id)
        REFERENCES occ.agent_revisions (id, agent_id, namespace_id) ON DELETE CASCADE,
    CONSTRAINT credential_withdrawals_revoked_check
        CHECK ((state = 'revoked') = (revoked_at IS NOT NULL)),
    CONSTRAINT credential_withdrawals_attempt_check
        CHECK ((last_reason IS NULL) = (last_at IS NULL))
);
CREATE INDEX credential_withdrawals_by_agent ON occ.credential_withdrawals (agent_id, revision_id);

-- The withdrawal work kind (SPEC §12): Agent, revision and target `credential_withdrawal`;
-- key `agent_revision:<rev>:credential_withdrawal:<op>`, with `:recovery:<n>` (1..15) for its
-- recovery series; `<op>` is `activation`, `retirement` or a UUID.
ALTER TABLE occ.work DROP CONSTRAINT work_agent_target_check;
ALTER TABLE occ.work ADD CONSTRAINT work_agent_target_check
    CHECK (agent_target = ANY (ARRAY['stopped'::text, 'deleted'::text, 'sandbox_policy'::text,
                                     'credential_withdrawal'::text]));
ALTER TABLE occ.work DROP CONSTRAINT work_shape;
ALTER TABLE occ.work ADD CONSTRAINT work_shape CHECK (
    (namespace_target IS NOT NULL AND agent_id IS NULL AND agent_target IS NULL
     AND revision_id IS NULL)
    OR (agent_id IS NOT NULL AND agent_target IS NOT NULL
        AND agent_target <> 'credential_withdrawal' AND namespace_target IS NULL
        AND revision_id IS NULL)
    OR (agent_id IS NOT NULL AND revision_id IS NOT NULL AND namespace_target IS NULL
        AND agent_target IS NULL)
    OR (agent_id IS NOT NULL AND revision_id IS NOT NULL AND namespace_target IS NULL
        AND agent_target = 'credential_withdrawal'));

CREATE OR REPLACE FUNCTION occ.work_key_check() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
BEGIN
    IF NOT coalesce(
        (NEW.namespace_target = 'ready'
         AND NEW.idempotency_key = 'namespace:' || NEW.namespace_id || ':ensure')
        OR (NEW.namespace_target = 'deleted'
            AND starts_with(NEW.idempotency_key, 'namespace:' || NEW.namespace_id || ':delete')
            AND substr(NEW.idempotency_key,
                       length('namespace:' || NEW.namespace_id || ':delete') + 1)
                ~ '^(:[1-9][0-9]*)?$')
        OR (NEW.agent_target = 'stopped'
            AND starts_with(NEW.idempotency_key, 'agent:' || NEW.agent_id || ':stop:')
            AND substr(NEW.idempotency_key, length('agent:' || NEW.agent_id || ':stop:') + 1)
                ~ '^[1-9][0-9]*$')
        OR (NEW.agent_target = 'deleted'
            AND starts_with(NEW.idempotency_key, 'agent:' || NEW.agent_id || ':delete')
            AND substr(NEW.idempotency_key, length('agent:' || NEW.agent_id || ':delete') + 1)
                ~ '^(:[1-9][0-9]*)?$')
        OR (NEW.agent_target = 'sandbox_policy'
            AND starts_with(NEW.idempotency_key, 'agent:' || NEW.agent_id || ':sandbox_policy:')
            AND substr(NEW.idempotency_key,
                       length('agent:' || NEW.agent_id || ':sandbox_policy:') + 1)
                ~ '^[1-9][0-9]{0,8}$')
        OR (NEW.agent_target = 'credential_withdrawal'
            AND starts_with(NEW.idempotency_key,
                            'agent_revision:' || NEW.revision_id || ':credential_withdrawal:')
            AND substr(NEW.idempotency_key,
                       length('agent_revision:' || NEW.revision_id || ':credential_withdrawal:') + 1)
                ~ '^(activation|retirement|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(:recovery:([1-9]|1[0-5]))?$')
        OR (NEW.revision_id IS NOT NULL AND NEW.agent_target IS NULL
            AND starts_with(NEW.idempotency_key, 'agent_revision:' || NEW.revision_id || ':')
            AND substr(NEW.idempotency_key,
                       length('agent_revision:' || NEW.revision_id || ':') + 1)
                ~ '^(reconcile|maintenance:[0-9]+)$'),
        false)
    THEN
        -- As PostgreSQL words a CHECK violation, without the row's values.
        RAISE EXCEPTION 'new row for relation "work" violates check constraint "work_key"'
            USING ERRCODE = 'check_violation', SCHEMA = 'occ', TABLE = 'work',
                  CONSTRAINT = 'work_key';
    END IF;
    -- Ignored after an update.
    RETURN NEW;
END $_$;

DROP VIEW occ.revision_status;
DROP VIEW occ.work_status;
ALTER TABLE occ.work DROP COLUMN operation;
-- In SPEC Q2x's dispatch order: sandbox policy, credential withdrawal, revision, Agent
-- target, Namespace target.
ALTER TABLE occ.work ADD COLUMN operation text GENERATED ALWAYS AS (
CASE
    WHEN (agent_target = 'sandbox_policy'::text) THEN 'agent_sandbox_policy'::text
    WHEN (agent_target = 'credential_withdrawal'::text) THEN 'agent_credential_withdrawal'::text
    WHEN (revision_id IS NOT NULL AND idempotency_key ~~ 'agent_revision:%:maintenance:%'::text) THEN 'revision_maintenance'::text
    WHEN (revision_id IS NOT NULL) THEN 'revision_reconcile'::text
    WHEN (agent_target = 'stopped'::text) THEN 'agent_stop'::text
    WHEN (agent_target = 'deleted'::text) THEN 'agent_delete'::text
    WHEN (namespace_target = 'ready'::text) THEN 'namespace_ensure'::text
    WHEN (namespace_target = 'deleted'::text) THEN 'namespace_delete'::text
END) STORED;

CREATE VIEW occ.work_status AS
 SELECT w.id,
    w.idempotency_key,
    w.namespace_id,
    w.agent_id,
    w.revision_id,
    w.namespace_target,
    w.agent_target,
    w.actor_id,
        CASE
            WHEN (l.claim_id IS NOT NULL) THEN 'claimed'::text
            ELSE w.state
        END AS state,
    COALESCE(l.claim_attempt, w.attempt_count) AS attempt_count,
    w.available_at,
    l.claim_token,
    l.claimed_at,
    l.lease_expires_at,
    w.reason_code,
    w.result_data,
    w.created_at,
    GREATEST(w.updated_at, l.renewed_at) AS updated_at,
    w.completed_at,
    w.lane,
    w.operation
   FROM (occ.work w
     LEFT JOIN occ.work_lanes l ON (((l.lane = w.lane) AND (l.claim_id = w.id))));

CREATE VIEW occ.revision_status AS
 SELECT r.id AS revision_id,
    r.namespace_id,
    r.agent_id,
    r.revision,
        CASE
            WHEN (w.id IS NULL) THEN 'unknown'::text
            WHEN (w.state = 'queued'::text) THEN 'pending'::text
            WHEN (w.state = 'claimed'::text) THEN 'deploying'::text
            WHEN (w.state = 'failed_permanent'::text) THEN 'failed'::text
            WHEN (w.reason_code = 'REVISION_SUPERSEDED'::text) THEN 'superseded'::text
            WHEN (w.reason_code = 'REVISION_STOPPED'::text) THEN 'stopped'::text
            WHEN (a.active_revision_id = r.id) THEN 'active'::text
            WHEN (r.retired_at IS NOT NULL) THEN 'superseded'::text
            ELSE 'stopped'::text
        END AS state,
    w.reason_code,
        CASE
            WHEN (w.state = 'failed_permanent'::text) THEN w.reason_code
            ELSE NULL::text
        END AS error,
    COALESCE((w.result_data -> 'warnings'::text), '[]'::jsonb) AS warnings,
    w.result_data,
    COALESCE(w.attempt_count, 0) AS attempts,
    r.created_at,
    w.updated_at,
    w.completed_at,
    r.retired_at
   FROM ((occ.agent_revisions r
     JOIN occ.agents a ON ((a.id = r.agent_id)))
     LEFT JOIN occ.work_status w ON ((w.idempotency_key = (('agent_revision:'::text || r.id) || ':reconcile'::text))));

-- SPEC E15: a pending row *awaits replay* when its last reason asks an operator to act.
CREATE FUNCTION occ.credential_withdrawal_awaits_replay(p_reason text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    RETURN coalesce(p_reason IN ('AUTHORIZATION_DENIED', 'ACTOR_REVOKED',
                                 'CREDENTIAL_WITHDRAWAL_MISCONFIGURED',
                                 'CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT',
                                 'CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT'), false);

-- Whether a revision has withdrawal work queued or claimed (a claimed work stays `queued`),
-- other than the work p_except (the one a finalizing transaction is about to end).
CREATE FUNCTION occ.credential_withdrawal_outstanding(p_agent text, p_revision text,
    p_except bigint DEFAULT NULL) RETURNS boolean
    LANGUAGE sql STABLE
    RETURN EXISTS (SELECT 1 FROM occ.work w
                   WHERE w.agent_id = p_agent AND w.revision_id = p_revision
                     AND w.agent_target = 'credential_withdrawal' AND w.state = 'queued'
                     AND w.id IS DISTINCT FROM p_except);

-- SPEC E15: a row *needs an attempt* when it is pending, does not await replay, and its
-- revision has no outstanding withdrawal work, so a revision has one chain at a time.
CREATE FUNCTION occ.credential_withdrawal_needs_attempt(w occ.credential_withdrawals)
    RETURNS boolean
    LANGUAGE sql STABLE
    RETURN w.state = 'pending' AND NOT occ.credential_withdrawal_awaits_replay(w.last_reason)
       AND NOT occ.credential_withdrawal_outstanding(w.agent_id, w.revision_id);

-- Enqueues one withdrawal work of a revision (SPEC §12): key
-- `agent_revision:<rev>:credential_withdrawal:<p_suffix>`, a fresh UUID when p_suffix is NULL,
-- available p_delay_ms after now on the database clock. The key, or NULL when it exists.
CREATE FUNCTION occ.credential_withdrawal_enqueue(p_namespace text, p_agent text,
    p_revision text, p_actor text, p_suffix text, p_delay_ms bigint) RETURNS text
    LANGUAGE sql
    AS $$
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, agent_target,
                          actor_id, available_at)
    VALUES ('agent_revision:' || p_revision || ':credential_withdrawal:'
                || coalesce(p_suffix, gen_random_uuid()::text),
            p_namespace, p_agent, p_revision, 'credential_withdrawal', p_actor,
            clock_timestamp() + p_delay_ms * interval '1 millisecond')
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING idempotency_key
$$;

-- SPEC E14's runtime holders: the Agent's revisions that may still hold a runtime — the
-- active one; the newest newer than it (any, when none is active) whose own `:reconcile` work
-- is not terminal; the newest newer than it whose deployment failed and which is not retired
-- (its runtime kept for diagnosis); the newest older than it not retired.
CREATE FUNCTION occ.runtime_holders(p_agent text) RETURNS SETOF text
    LANGUAGE sql STABLE
    AS $$
    WITH a AS (
        SELECT ag.active_revision_id AS active_id,
               (SELECT r.revision FROM occ.agent_revisions r
                WHERE r.id = ag.active_revision_id) AS active_n
        FROM occ.agents ag WHERE ag.id = p_agent),
    revs AS (
        SELECT r.id, r.revision, r.retired_at, w.state AS work_state
        FROM occ.agent_revisions r
        LEFT JOIN occ.work w ON w.idempotency_key = 'agent_revision:' || r.id || ':reconcile'
        WHERE r.agent_id = p_agent)
    SELECT active_id FROM a WHERE active_id IS NOT NULL
    UNION
    (SELECT r.id FROM revs r, a
     WHERE r.revision > coalesce(a.active_n, 0) AND r.work_state = 'queued'
     ORDER BY r.revision DESC LIMIT 1)
    UNION
    (SELECT r.id FROM revs r, a
     WHERE r.revision > coalesce(a.active_n, 0) AND r.work_state = 'failed_permanent'
       AND r.retired_at IS NULL
     ORDER BY r.revision DESC LIMIT 1)
    UNION
    (SELECT r.id FROM revs r, a
     WHERE a.active_n IS NOT NULL AND r.revision < a.active_n AND r.retired_at IS NULL
     ORDER BY r.revision DESC LIMIT 1)
$$;
