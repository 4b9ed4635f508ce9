-- Agent and AgentRevision admission (SPEC A1, A2, R1, R12): the contract any API server calls.
-- Every function authorizes the actor against the current IAM policy, refuses with a clear
-- error, and writes its rows and its work in one transaction. Forward-only; never edit once
-- landed.

-- Authorization is V3's `occ.authorize` (the semantics of src/iam.rs); this wrapper names a
-- missing actor first, then refuses with the decision's reason.
CREATE FUNCTION occ.agent_require(p_principal text, p_action text, p_kind text,
                                  p_resource text, p_namespace text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM occ.identities WHERE id = p_principal) THEN
        RAISE EXCEPTION 'actor % does not exist', p_principal USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM occ.require_authorized(p_principal, p_action, p_kind, p_resource, p_namespace,
        p_action || ' ' || p_kind);
END $$;

-- The id of a live Namespace named by id or name (V3's `occ.resolve_namespace`), which must be
-- `ready` for any Agent, Configuration or Secret admission.
CREATE FUNCTION occ.agent_ready_namespace(p_namespace text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    ns text := occ.resolve_namespace(p_namespace);
    s text;
BEGIN
    SELECT status INTO s FROM occ.namespaces WHERE id = ns;
    IF s <> 'ready' THEN
        RAISE EXCEPTION 'namespace % is % (must be ready)', p_namespace, s
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN ns;
END $$;

-- Like `agent_ready_namespace`, but holds the Namespace row FOR SHARE until commit: an Agent
-- admission and `namespace_delete` (which locks the row FOR UPDATE and refuses while Agents
-- exist) serialize, so no Agent is created in a Namespace whose deletion is being admitted.
CREATE FUNCTION occ.agent_lock_ready_namespace(p_namespace text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    ns text := occ.resolve_namespace(p_namespace);
    s text;
BEGIN
    SELECT status INTO s FROM occ.namespaces_all WHERE id = ns AND deleted_at IS NULL FOR SHARE;
    IF s IS DISTINCT FROM 'ready' THEN
        RAISE EXCEPTION 'namespace % is % (must be ready)', p_namespace, coalesce(s, 'missing')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN ns;
END $$;

-- Locks the named Agent (by id or name) for a synchronous mutation; refuses a deleting Agent
-- unless `p_allow_deleting`.
CREATE FUNCTION occ.agent_lock(p_namespace text, p_agent text, p_allow_deleting boolean DEFAULT false)
RETURNS occ.agents LANGUAGE plpgsql AS $$
DECLARE
    a occ.agents;
BEGIN
    SELECT * INTO a FROM occ.agents
    WHERE namespace_id = p_namespace AND (id = p_agent OR name = p_agent)
    ORDER BY (id = p_agent) DESC LIMIT 1
    FOR UPDATE;
    IF a.id IS NULL THEN
        RAISE EXCEPTION 'agent %/% does not exist', p_namespace, p_agent USING ERRCODE = 'no_data_found';
    END IF;
    IF a.status = 'deleting' AND NOT p_allow_deleting THEN
        RAISE EXCEPTION 'agent %/% is being deleted', p_namespace, a.id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN a;
END $$;

CREATE FUNCTION occ.agent_new_id(prefix text) RETURNS text LANGUAGE sql VOLATILE
    RETURN prefix || '-' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 20);

CREATE FUNCTION occ.agent_audit(p_namespace text, p_actor text, p_action text, p_kind text,
                                p_resource text, p_details jsonb) RETURNS void
LANGUAGE sql AS $$
    SELECT occ.audit_admission(p_actor, p_action, p_kind, p_resource, p_namespace, NULL, p_details)
$$;

-- Agent create: the Agent and its stable service principal in one transaction.
CREATE FUNCTION occ.agent_create(p_namespace text, p_name text, p_actor text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    agent_id text := occ.agent_new_id('ag');
    principal text := occ.agent_new_id('sp');
BEGIN
    p_namespace := occ.agent_lock_ready_namespace(p_namespace);
    PERFORM occ.agent_require(p_actor, 'create', 'agent', p_name, p_namespace);
    IF EXISTS (SELECT 1 FROM occ.agents WHERE namespace_id = p_namespace AND name = p_name) THEN
        RAISE EXCEPTION 'agent %/% already exists', p_namespace, p_name USING ERRCODE = 'unique_violation';
    END IF;
    INSERT INTO occ.agents (id, namespace_id, name, service_principal_id, created_by)
    VALUES (agent_id, p_namespace, p_name, principal, p_actor);
    INSERT INTO occ.identities (id, kind, namespace_id, agent_id)
    VALUES (principal, 'service_principal', p_namespace, agent_id);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.create', 'agent', agent_id,
        jsonb_build_object('name', p_name, 'servicePrincipalId', principal));
    RETURN jsonb_build_object('id', agent_id, 'namespaceId', p_namespace, 'name', p_name,
        'servicePrincipalId', principal);
END $$;

-- Configuration put: a new generation on every put.
CREATE FUNCTION occ.configuration_put(p_namespace text, p_id text, p_document jsonb, p_actor text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    gen integer;
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    IF p_document IS NULL OR jsonb_typeof(p_document) <> 'object' THEN
        RAISE EXCEPTION 'configuration document must be a JSON object' USING ERRCODE = 'check_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM occ.configurations WHERE namespace_id = p_namespace AND id = p_id) THEN
        PERFORM occ.agent_require(p_actor, 'administer', 'configuration', p_id, p_namespace);
    ELSE
        PERFORM occ.agent_require(p_actor, 'create', 'configuration', p_id, p_namespace);
    END IF;
    INSERT INTO occ.configurations (namespace_id, id, generation, document, updated_by)
    VALUES (p_namespace, p_id, 1, p_document, p_actor)
    ON CONFLICT (namespace_id, id) DO UPDATE
        SET generation = occ.configurations.generation + 1, document = EXCLUDED.document,
            updated_by = EXCLUDED.updated_by, updated_at = clock_timestamp()
    RETURNING generation INTO gen;
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.configurations.put', 'configuration', p_id,
        jsonb_build_object('generation', gen));
    RETURN jsonb_build_object('namespaceId', p_namespace, 'id', p_id, 'generation', gen);
END $$;

-- Secret create: a backend reference only, never a value.
CREATE FUNCTION occ.secret_create(p_namespace text, p_id text, p_backend_ref text, p_actor text)
RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    PERFORM occ.agent_require(p_actor, 'create', 'secret', p_id, p_namespace);
    INSERT INTO occ.secrets (namespace_id, id, backend_ref, created_by)
    VALUES (p_namespace, p_id, p_backend_ref, p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.secrets.create', 'secret', p_id, '{}');
    RETURN jsonb_build_object('namespaceId', p_namespace, 'id', p_id, 'backendRef', p_backend_ref);
END $$;

-- The approved Harness versions admission pins (the worker re-checks its own table, R2).
CREATE FUNCTION occ.agent_default_harness_version(p_harness text) RETURNS text
LANGUAGE sql IMMUTABLE
    RETURN CASE p_harness WHEN 'codex' THEN '1.0.0' WHEN 'openclaw' THEN '1.0.0' END;

-- Bodyless deploy (R1): snapshots the Configuration and the pinned Harness, Compute and auth
-- choices into the next revision and enqueues its reconcile work in the same transaction. A
-- deployment makes the Agent's desired runtime state `running` again.
CREATE FUNCTION occ.agent_deploy(
    p_namespace text, p_agent text, p_actor text, p_configuration text,
    p_harness text, p_mode text, p_harness_secret text,
    p_compute_id text, p_compute_implementation text,
    p_secret_bindings jsonb DEFAULT '{}', p_plugins jsonb DEFAULT '[]',
    p_harness_version text DEFAULT NULL
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    a occ.agents;
    c occ.configurations;
    rev_id text := occ.agent_new_id('rev');
    rev_no integer;
    work_key text;
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
    IF NOT EXISTS (SELECT 1 FROM occ.secrets WHERE namespace_id = p_namespace AND id = p_harness_secret) THEN
        RAISE EXCEPTION 'secret %/% does not exist', p_namespace, p_harness_secret
            USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.agent_require(p_actor, 'operate', 'secret', p_harness_secret, p_namespace);
    IF occ.agent_default_harness_version(p_harness) IS NULL THEN
        RAISE EXCEPTION 'harness % is not approved (codex or openclaw)', p_harness
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT coalesce(max(revision), 0) + 1 INTO rev_no FROM occ.agent_revisions WHERE agent_id = a.id;
    INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id,
        service_principal_id, configuration_id, configuration_generation, document,
        harness_id, harness_version, harness_mode, execution_mode, compute_id,
        compute_implementation, harness_auth, secret_bindings, plugins)
    VALUES (rev_id, p_namespace, a.id, rev_no, p_actor, a.service_principal_id, c.id,
        c.generation, c.document, p_harness,
        coalesce(p_harness_version, occ.agent_default_harness_version(p_harness)),
        p_mode, p_mode, p_compute_id, p_compute_implementation,
        jsonb_build_object('method', 'secret',
            'source', jsonb_build_object('namespaceId', p_namespace, 'id', p_harness_secret)),
        coalesce(p_secret_bindings, '{}'), coalesce(p_plugins, '[]'));
    UPDATE occ.agents SET desired_runtime_state = 'running', updated_at = clock_timestamp()
    WHERE id = a.id;
    work_key := 'agent_revision:' || rev_id || ':reconcile';
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
    VALUES (work_key, p_namespace, a.id, rev_id, p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.deploy.admit', 'agent_revision', rev_id,
        jsonb_build_object('agentId', a.id, 'revision', rev_no));
    RETURN jsonb_build_object('agentId', a.id, 'revisionId', rev_id, 'revision', rev_no,
        'work', work_key);
END $$;

-- Stop (A1): desired `stopped` and the next `agent:<id>:stop:<n>`.
CREATE FUNCTION occ.agent_stop(p_namespace text, p_agent text, p_actor text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    a occ.agents;
    n integer;
    work_key text;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    a := occ.agent_lock(p_namespace, p_agent);
    PERFORM occ.agent_require(p_actor, 'operate', 'agent', a.id, p_namespace);
    UPDATE occ.agents SET desired_runtime_state = 'stopped', updated_at = clock_timestamp()
    WHERE id = a.id;
    SELECT count(*) + 1 INTO n FROM occ.work WHERE agent_id = a.id AND agent_target = 'stopped';
    work_key := 'agent:' || a.id || ':stop:' || n;
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, agent_target, actor_id)
    VALUES (work_key, p_namespace, a.id, 'stopped', p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.stop.admit', 'agent', a.id, '{}');
    RETURN jsonb_build_object('agentId', a.id, 'work', work_key);
END $$;

-- Delete (A2): status `deleting`, desired `stopped`, `agent:<id>:delete`. Called again on an
-- Agent whose last deletion failed for good, it is the explicit retry (`:delete:<n>`, Q9).
CREATE FUNCTION occ.agent_delete(p_namespace text, p_agent text, p_actor text) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    a occ.agents;
    n integer;
    work_key text;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    a := occ.agent_lock(p_namespace, p_agent, true);
    PERFORM occ.agent_require(p_actor, 'delete', 'agent', a.id, p_namespace);
    IF a.status = 'deleting' THEN
        IF EXISTS (SELECT 1 FROM occ.work WHERE agent_id = a.id AND agent_target = 'deleted'
                   AND state IN ('queued', 'claimed')) THEN
            RAISE EXCEPTION 'agent %/% is being deleted', p_namespace, a.id
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        SELECT count(*) INTO n FROM occ.work WHERE agent_id = a.id AND agent_target = 'deleted';
        work_key := 'agent:' || a.id || ':delete:' || n;
    ELSE
        UPDATE occ.agents SET status = 'deleting', desired_runtime_state = 'stopped',
            updated_at = clock_timestamp()
        WHERE id = a.id;
        work_key := 'agent:' || a.id || ':delete';
    END IF;
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, agent_target, actor_id)
    VALUES (work_key, p_namespace, a.id, 'deleted', p_actor);
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.delete.admit', 'agent', a.id, '{}');
    RETURN jsonb_build_object('agentId', a.id, 'work', work_key);
END $$;

-- Snapshot integrity (R1): a revision is numbered max+1 for its Agent, names the Agent's own
-- service principal, pins plugins as `[{"id": text}]` and secret bindings as
-- `{"ENV": {"namespaceId": text, "id": text}}`, and never changes after admission except for
-- its retirement time.
CREATE FUNCTION occ.agent_revision_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    a occ.agents;
    expected integer;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (to_jsonb(NEW) - 'retired_at') IS DISTINCT FROM (to_jsonb(OLD) - 'retired_at')
           OR (OLD.retired_at IS NOT NULL AND NEW.retired_at IS DISTINCT FROM OLD.retired_at) THEN
            RAISE EXCEPTION 'agent revision % is immutable', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END IF;
    SELECT * INTO a FROM occ.agents WHERE namespace_id = NEW.namespace_id AND id = NEW.agent_id FOR UPDATE;
    IF a.id IS NULL THEN
        RAISE EXCEPTION 'agent %/% does not exist', NEW.namespace_id, NEW.agent_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    SELECT coalesce(max(revision), 0) + 1 INTO expected FROM occ.agent_revisions WHERE agent_id = NEW.agent_id;
    IF NEW.revision <> expected THEN
        RAISE EXCEPTION 'revision number must be % for agent %', expected, NEW.agent_id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.service_principal_id <> a.service_principal_id THEN
        RAISE EXCEPTION 'revision must name the service principal of agent %', a.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(NEW.plugins) p
               WHERE jsonb_typeof(p) <> 'object' OR jsonb_typeof(p->'id') IS DISTINCT FROM 'string'
                  OR NOT occ.is_ident(p->>'id')) THEN
        RAISE EXCEPTION 'plugins must be [{"id": identifier}]' USING ERRCODE = 'check_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_each(NEW.secret_bindings) b
               WHERE b.key !~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$' OR jsonb_typeof(b.value) <> 'object'
                  OR jsonb_typeof(b.value->'namespaceId') IS DISTINCT FROM 'string'
                  OR jsonb_typeof(b.value->'id') IS DISTINCT FROM 'string') THEN
        RAISE EXCEPTION 'secret bindings must be {"ENV": {"namespaceId", "id"}}' USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.harness_auth IS NOT NULL AND (
        jsonb_typeof(NEW.harness_auth->'source'->'namespaceId') IS DISTINCT FROM 'string'
        OR jsonb_typeof(NEW.harness_auth->'source'->'id') IS DISTINCT FROM 'string') THEN
        RAISE EXCEPTION 'harness auth source must name a namespaceId and id' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER agent_revisions_guard BEFORE INSERT OR UPDATE ON occ.agent_revisions
    FOR EACH ROW EXECUTE FUNCTION occ.agent_revision_guard();

-- R12: the deployment status of every revision, read from its reconcile work.
CREATE VIEW occ.revision_status AS
SELECT r.id AS revision_id, r.namespace_id, r.agent_id, r.revision,
    CASE
        WHEN w.id IS NULL THEN 'unknown'
        WHEN w.state = 'queued' THEN 'pending'
        WHEN w.state = 'claimed' THEN 'deploying'
        WHEN w.state = 'failed_permanent' THEN 'failed'
        WHEN w.reason_code = 'REVISION_SUPERSEDED' THEN 'superseded'
        WHEN w.reason_code = 'REVISION_STOPPED' THEN 'stopped'
        WHEN a.active_revision_id = r.id THEN 'active'
        WHEN r.retired_at IS NOT NULL THEN 'superseded'
        ELSE 'stopped'
    END AS state,
    w.reason_code,
    CASE WHEN w.state = 'failed_permanent' THEN w.reason_code END AS error,
    coalesce(w.result_data->'warnings', '[]'::jsonb) AS warnings,
    w.result_data,
    coalesce(w.attempt_count, 0) AS attempts,
    r.created_at, w.updated_at, w.completed_at, r.retired_at
FROM occ.agent_revisions r
JOIN occ.agents a ON a.id = r.agent_id
LEFT JOIN occ.work w ON w.idempotency_key = 'agent_revision:' || r.id || ':reconcile';

-- Read model for operators: an Agent with every revision's deployment status (R12).
CREATE FUNCTION occ.agent_show(p_namespace text, p_agent text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    a occ.agents;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    SELECT * INTO a FROM occ.agents
    WHERE namespace_id = p_namespace AND (id = p_agent OR name = p_agent)
    ORDER BY (id = p_agent) DESC LIMIT 1;
    IF a.id IS NULL THEN
        RAISE EXCEPTION 'agent %/% does not exist', p_namespace, p_agent USING ERRCODE = 'no_data_found';
    END IF;
    RETURN jsonb_build_object(
        'id', a.id, 'namespaceId', a.namespace_id, 'name', a.name, 'status', a.status,
        'desiredRuntimeState', a.desired_runtime_state, 'activeRevisionId', a.active_revision_id,
        'servicePrincipalId', a.service_principal_id,
        'revisions', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'id', s.revision_id, 'revision', s.revision, 'state', s.state,
                'reasonCode', s.reason_code, 'error', s.error, 'warnings', s.warnings,
                'attempts', s.attempts, 'createdAt', s.created_at, 'updatedAt', s.updated_at,
                'completedAt', s.completed_at, 'retiredAt', s.retired_at) ORDER BY s.revision)
            FROM occ.revision_status s WHERE s.agent_id = a.id), '[]'::jsonb));
END $$;
