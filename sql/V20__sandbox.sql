-- SPEC S2: the Sandbox Driver's id and facets, pinned into each revision at admission.
-- `occ.agent_deploy` takes the selected driver's id and facets (the CLI reads them from the
-- Installation configuration file) and refuses a Configuration whose `sandbox.requiredFacets`
-- names one the driver does not offer (SANDBOX_FACET_UNAVAILABLE).

ALTER TABLE occ.agent_revisions
    ADD COLUMN sandbox_driver_id text
        CONSTRAINT agent_revisions_sandbox_driver_id_check
        CHECK (sandbox_driver_id IS NULL OR (length(btrim(sandbox_driver_id)) > 0 AND length(sandbox_driver_id) <= 128)),
    ADD COLUMN sandbox_facets jsonb NOT NULL DEFAULT '[]'::jsonb
        CONSTRAINT agent_revisions_sandbox_facets_check
        CHECK (jsonb_typeof(sandbox_facets) = 'array'
               AND (sandbox_driver_id IS NOT NULL OR sandbox_facets = '[]'::jsonb));

DROP FUNCTION occ.agent_deploy(text, text, text, text, text, text, text, text, text, jsonb, jsonb, text, text);

CREATE FUNCTION occ.agent_deploy(p_namespace text, p_agent text, p_actor text, p_configuration text, p_harness text, p_mode text, p_harness_secret text, p_compute_id text, p_compute_implementation text, p_secret_bindings jsonb DEFAULT '{}'::jsonb, p_plugins jsonb DEFAULT '[]'::jsonb, p_harness_version text DEFAULT NULL::text, p_service_account text DEFAULT NULL::text, p_sandbox_driver_id text DEFAULT NULL::text, p_sandbox_facets jsonb DEFAULT NULL::jsonb) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    a occ.agents;
    c occ.configurations;
    rev_id text := occ.agent_new_id('rev');
    rev_no integer;
    work_key text;
    approved text;
    auth jsonb;
    backend text;
    facets jsonb := coalesce(p_sandbox_facets, '[]'::jsonb);
    missing text;
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    a := occ.agent_lock(p_namespace, p_agent);
    PERFORM occ.agent_require(p_actor, 'deploy', 'agent', a.id, p_namespace);
    PERFORM occ.agent_require(p_actor, 'read', 'configuration', p_configuration, p_namespace);
    SELECT * INTO c FROM occ.configurations WHERE namespace_id = p_namespace AND id = p_configuration;
    IF c.id IS NULL THEN
        RAISE EXCEPTION 'configuration %/% does not exist', p_namespace, p_configuration
            USING ERRCODE = 'no_data_found';
    END IF;
    IF (p_harness_secret IS NULL) = (p_service_account IS NULL) THEN
        RAISE EXCEPTION 'a deployment needs exactly one harness auth: a harness Secret or a service account'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_harness_secret IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM occ.secrets WHERE namespace_id = p_namespace AND id = p_harness_secret) THEN
            RAISE EXCEPTION 'secret %/% does not exist', p_namespace, p_harness_secret
                USING ERRCODE = 'no_data_found';
        END IF;
        PERFORM occ.agent_require(p_actor, 'operate', 'secret', p_harness_secret, p_namespace);
        auth := jsonb_build_object('method', 'secret',
            'source', jsonb_build_object('namespaceId', p_namespace, 'id', p_harness_secret));
    ELSE
        auth := occ.service_account_harness_auth(p_namespace, p_service_account, p_actor);
        backend := auth->'backendBinding'->>'backendId';
    END IF;
    -- SPEC S2: the selected Sandbox Driver's facets are pinned; a Configuration requiring one
    -- it does not offer is refused.
    IF jsonb_typeof(facets) <> 'array' OR EXISTS (
        SELECT 1 FROM jsonb_array_elements(facets) f WHERE jsonb_typeof(f) <> 'string') THEN
        RAISE EXCEPTION 'sandbox facets must be a JSON array of strings'
            USING ERRCODE = 'check_violation';
    END IF;
    IF p_sandbox_driver_id IS NULL AND facets <> '[]'::jsonb THEN
        RAISE EXCEPTION 'sandbox facets need a Sandbox Driver id'
            USING ERRCODE = 'check_violation';
    END IF;
    IF jsonb_typeof(c.document->'sandbox'->'requiredFacets') = 'array' THEN
        SELECT string_agg(r, ', ' ORDER BY r) INTO missing
        FROM jsonb_array_elements_text(c.document->'sandbox'->'requiredFacets') r
        WHERE NOT facets ? r;
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'SANDBOX_FACET_UNAVAILABLE: configuration % requires sandbox facets % that %',
                c.id, missing,
                CASE WHEN p_sandbox_driver_id IS NULL THEN 'no Sandbox Driver is selected to offer'
                     ELSE 'Sandbox Driver ' || p_sandbox_driver_id || ' does not offer' END
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      HINT = 'SANDBOX_FACET_UNAVAILABLE';
        END IF;
    END IF;
    approved := occ.approved_harness_version(p_harness, p_mode);
    IF approved IS NULL THEN
        RAISE EXCEPTION 'harness % is not approved in % mode', p_harness, p_mode
            USING ERRCODE = 'check_violation';
    END IF;
    IF p_harness_version IS NOT NULL AND p_harness_version IS DISTINCT FROM approved THEN
        RAISE EXCEPTION 'harness % % version % is not the approved version %',
            p_harness, p_mode, p_harness_version, approved
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT coalesce(max(revision), 0) + 1 INTO rev_no FROM occ.agent_revisions WHERE agent_id = a.id;
    INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id,
        service_principal_id, configuration_id, configuration_generation, document,
        harness_id, harness_version, harness_mode, execution_mode, compute_id,
        compute_implementation, harness_auth, secret_bindings, plugins, backend_id,
        sandbox_driver_id, sandbox_facets)
    VALUES (rev_id, p_namespace, a.id, rev_no, p_actor, a.service_principal_id, c.id,
        c.generation, c.document, p_harness, approved,
        p_mode, p_mode, p_compute_id, p_compute_implementation,
        auth, coalesce(p_secret_bindings, '{}'), coalesce(p_plugins, '[]'), backend,
        p_sandbox_driver_id, facets);
    UPDATE occ.agents SET desired_runtime_state = 'running', updated_at = clock_timestamp()
    WHERE id = a.id;
    work_key := 'agent_revision:' || rev_id || ':reconcile';
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
    VALUES (work_key, p_namespace, a.id, rev_id, p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.deploy.admit', 'agent_revision', rev_id,
        jsonb_build_object('agentId', a.id, 'revision', rev_no, 'harnessAuth', auth->>'method',
            'sandboxDriverId', p_sandbox_driver_id, 'sandboxFacets', facets));
    RETURN jsonb_build_object('agentId', a.id, 'revisionId', rev_id, 'revision', rev_no,
        'work', work_key, 'sandboxDriverId', p_sandbox_driver_id, 'sandboxFacets', facets);
END $$;


-- SPEC S3: an Agent's sandbox policy, its egress allowlist. One row per Agent holding the latest
-- generation; its work `agent:<id>:sandbox_policy:<generation>` runs in the Agent's lane.

CREATE FUNCTION occ.is_egress(p_egress jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    -- Each set function reads only what its CASE proved to be an array or object, so a
    -- malformed value answers false instead of raising.
    RETURN jsonb_typeof(p_egress) = 'array'
        AND NOT EXISTS (
            SELECT 1
            FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_egress) = 'array'
                                           THEN p_egress ELSE '[]'::jsonb END) e
            WHERE jsonb_typeof(e) <> 'object'
               OR (SELECT array_agg(k ORDER BY k)
                   FROM jsonb_object_keys(CASE WHEN jsonb_typeof(e) = 'object'
                                               THEN e ELSE '{}'::jsonb END) k)
                  IS DISTINCT FROM ARRAY['cidr', 'ports']
               OR jsonb_typeof(e->'cidr') IS DISTINCT FROM 'string'
               OR jsonb_typeof(e->'ports') IS DISTINCT FROM 'array'
               OR CASE WHEN jsonb_typeof(e->'ports') = 'array'
                       THEN jsonb_array_length(e->'ports') = 0 ELSE true END
               OR EXISTS (SELECT 1
                          FROM jsonb_array_elements(CASE WHEN jsonb_typeof(e->'ports') = 'array'
                                                         THEN e->'ports' ELSE '[]'::jsonb END) p
                          WHERE CASE WHEN jsonb_typeof(p) = 'number' AND p::text ~ '^[1-9][0-9]{0,4}$'
                                     THEN p::text::integer > 65535 ELSE true END));

-- Whether each entry's network lies within a ceiling entry's whose ports include all of its
-- ports (SPEC S3). Both must be `occ.is_egress` with valid networks.
CREATE FUNCTION occ.egress_within(p_egress jsonb, p_ceiling jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    RETURN NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(p_egress) e
        WHERE NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements(coalesce(p_ceiling, '[]'::jsonb)) c
            WHERE (e->>'cidr')::cidr <<= (c->>'cidr')::cidr
              AND (c->'ports') @> (e->'ports')));

CREATE TABLE occ.agent_sandbox_policies (
    agent_id text PRIMARY KEY REFERENCES occ.agents (id) ON DELETE CASCADE,
    namespace_id text NOT NULL,
    generation integer NOT NULL CHECK (generation > 0),
    egress jsonb NOT NULL CONSTRAINT agent_sandbox_policies_egress_check CHECK (occ.is_egress(egress)),
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'applied', 'failed')),
    reason_code text CHECK (reason_code ~ '^[A-Z][A-Z0-9_]*$'),
    updated_by text NOT NULL CHECK (length(updated_by) > 0),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((state = 'pending') = (reason_code IS NULL))
);

-- The new work kind: its target, key rule and operation (SPEC §12). The operation column is
-- generated, so it is dropped and added again with the views that read it.
ALTER TABLE occ.work DROP CONSTRAINT work_agent_target_check;
ALTER TABLE occ.work ADD CONSTRAINT work_agent_target_check
    CHECK (agent_target = ANY (ARRAY['stopped'::text, 'deleted'::text, 'sandbox_policy'::text]));

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
        OR (NEW.revision_id IS NOT NULL
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
-- In SPEC Q2x's dispatch order: sandbox policy, revision, Agent target, Namespace target.
ALTER TABLE occ.work ADD COLUMN operation text GENERATED ALWAYS AS (
CASE
    WHEN (agent_target = 'sandbox_policy'::text) THEN 'agent_sandbox_policy'::text
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

-- SPEC S3 admission: needs `operate` on an Agent that is not deleting and the policy within
-- the ceiling the caller passes (the CLI passes `sandboxNetworkPolicyCeiling`); stores the next
-- generation `pending`, enqueues its work and audits.
CREATE FUNCTION occ.agent_sandbox_policy_put(p_actor text, p_namespace text, p_agent text,
        p_policy jsonb, p_ceiling jsonb DEFAULT '[]'::jsonb) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    a occ.agents;
    egress jsonb := p_policy->'egress';
    ceiling jsonb := coalesce(p_ceiling, '[]'::jsonb);
    gen integer;
    work_key text;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    a := occ.agent_lock(p_namespace, p_agent);
    PERFORM occ.agent_require(p_actor, 'operate', 'agent', a.id, p_namespace);
    IF jsonb_typeof(p_policy) IS DISTINCT FROM 'object' OR NOT coalesce(occ.is_egress(egress), false) THEN
        RAISE EXCEPTION 'a sandbox policy is {"egress": [{"cidr": NETWORK, "ports": [TCP PORT 1-65535, ...]}, ...]}'
            USING ERRCODE = 'check_violation';
    END IF;
    IF NOT coalesce(occ.is_egress(ceiling), false) THEN
        RAISE EXCEPTION 'the sandbox network policy ceiling must be [{"cidr": NETWORK, "ports": [...]}, ...]'
            USING ERRCODE = 'check_violation';
    END IF;
    BEGIN
        PERFORM (e->>'cidr')::cidr FROM jsonb_array_elements(egress || ceiling) e;
    EXCEPTION WHEN invalid_text_representation OR invalid_binary_representation THEN
        RAISE EXCEPTION 'a sandbox policy cidr must be a network with its host bits zero, such as 10.0.0.0/8'
            USING ERRCODE = 'check_violation';
    END;
    IF NOT occ.egress_within(egress, ceiling) THEN
        RAISE EXCEPTION 'SANDBOX_POLICY_EXCEEDS_CEILING: the policy allows egress outside the sandbox network policy ceiling'
            USING ERRCODE = 'check_violation', HINT = 'SANDBOX_POLICY_EXCEEDS_CEILING';
    END IF;
    INSERT INTO occ.agent_sandbox_policies AS p (agent_id, namespace_id, generation, egress, updated_by)
    VALUES (a.id, p_namespace, 1, egress, p_actor)
    ON CONFLICT (agent_id) DO UPDATE
        SET generation = p.generation + 1, egress = EXCLUDED.egress, state = 'pending',
            reason_code = NULL, updated_by = EXCLUDED.updated_by, updated_at = clock_timestamp()
    RETURNING generation INTO gen;
    work_key := 'agent:' || a.id || ':sandbox_policy:' || gen;
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, agent_target, actor_id)
    VALUES (work_key, p_namespace, a.id, 'sandbox_policy', p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.sandbox_policy.admit', 'agent', a.id,
        jsonb_build_object('generation', gen, 'egress', egress));
    RETURN jsonb_build_object('agentId', a.id, 'generation', gen, 'state', 'pending',
        'egress', egress, 'work', work_key);
END $$;

-- The Agent's sandbox policy as stored (SPEC S3), or null when it has none.
CREATE FUNCTION occ.agent_sandbox_policy_show(p_namespace text, p_agent text) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    ns text := occ.resolve_namespace(p_namespace);
    a occ.agents;
BEGIN
    SELECT * INTO a FROM occ.agents
    WHERE namespace_id = ns AND (id = p_agent OR name = p_agent)
    ORDER BY (id = p_agent) DESC LIMIT 1;
    IF a.id IS NULL THEN
        RAISE EXCEPTION 'agent %/% does not exist', ns, p_agent USING ERRCODE = 'no_data_found';
    END IF;
    RETURN (SELECT jsonb_build_object('agentId', p.agent_id, 'namespaceId', p.namespace_id,
                'generation', p.generation, 'egress', p.egress, 'state', p.state,
                'reasonCode', p.reason_code, 'updatedBy', p.updated_by,
                'updatedAt', to_char(p.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                'work', 'agent:' || p.agent_id || ':sandbox_policy:' || p.generation)
            FROM occ.agent_sandbox_policies p WHERE p.agent_id = a.id);
END $$;
