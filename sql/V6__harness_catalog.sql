-- The approved-Harness catalog (seed 004 `resolveApprovedHarness`, 4234-4241): each Harness id
-- and mode has exactly one approved version. Admission pins it into a revision; the worker's R2
-- check compares the revision's version with the catalog on every pass, so approving a new
-- version refuses revisions admitted under the old one (`HARNESS_DESCRIPTOR_MISMATCH`).
-- Changed only through `occ.harness_approve` (installation `administer`, audited).

CREATE TABLE occ.approved_harnesses (
    harness_id   text NOT NULL CHECK (harness_id ~ '^[a-z][a-z0-9_-]{0,63}$'),
    mode         text NOT NULL CHECK (mode IN ('dedicated', 'embedded')),
    version      text NOT NULL CHECK (version ~ '^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$'),
    approved_by  text NOT NULL,
    approved_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (harness_id, mode)
);

INSERT INTO occ.approved_harnesses (harness_id, mode, version, approved_by) VALUES
    ('codex', 'dedicated', '1.0.0', 'migration'),
    ('codex', 'embedded', '1.0.0', 'migration'),
    ('openclaw', 'dedicated', '1.0.0', 'migration'),
    ('openclaw', 'embedded', '1.0.0', 'migration');

-- The exact approved version of a Harness in a mode, NULL when it is not approved.
CREATE FUNCTION occ.approved_harness_version(p_harness text, p_mode text) RETURNS text
LANGUAGE sql STABLE
    RETURN (SELECT version FROM occ.approved_harnesses WHERE harness_id = p_harness AND mode = p_mode);

-- Kept for callers that name no mode: the dedicated version, else any approved one.
CREATE OR REPLACE FUNCTION occ.agent_default_harness_version(p_harness text) RETURNS text
LANGUAGE sql STABLE
    RETURN (SELECT version FROM occ.approved_harnesses WHERE harness_id = p_harness
            ORDER BY mode = 'dedicated' DESC, mode LIMIT 1);

-- Every admission path pins an approved version: a revision whose Harness, mode and version are
-- not the catalog's at admission is refused (later catalog changes leave admitted rows alone).
CREATE FUNCTION occ.agent_revisions_harness_approved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    approved text := occ.approved_harness_version(NEW.harness_id, NEW.harness_mode);
BEGIN
    IF approved IS NULL THEN
        RAISE EXCEPTION 'harness % is not approved in % mode', NEW.harness_id, NEW.harness_mode
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.harness_version IS DISTINCT FROM approved THEN
        RAISE EXCEPTION 'harness % % version % is not the approved version %',
            NEW.harness_id, NEW.harness_mode, NEW.harness_version, approved
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER agent_revisions_harness_approved BEFORE INSERT ON occ.agent_revisions
    FOR EACH ROW EXECUTE FUNCTION occ.agent_revisions_harness_approved();

-- Bodyless deploy (R1), as in V4, pinning the catalog's exact version for the Harness and mode.
CREATE OR REPLACE FUNCTION occ.agent_deploy(
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
    approved text;
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
        compute_implementation, harness_auth, secret_bindings, plugins)
    VALUES (rev_id, p_namespace, a.id, rev_no, p_actor, a.service_principal_id, c.id,
        c.generation, c.document, p_harness, approved,
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

-- `admin harness list`: the catalog.
CREATE FUNCTION occ.harness_list() RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', harness_id, 'mode', mode,
               'version', version, 'approvedBy', approved_by, 'approvedAt', approved_at)
           ORDER BY harness_id, mode), '[]')
    FROM occ.approved_harnesses
$$;

-- `admin harness approve`: makes `p_version` the one approved version of a Harness in a mode
-- (installation `administer`), audited with the version it replaced.
CREATE FUNCTION occ.harness_approve(p_actor text, p_harness text, p_mode text, p_version text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    previous text;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'approve Harness versions');
    SELECT version INTO previous FROM occ.approved_harnesses
    WHERE harness_id = p_harness AND mode = p_mode FOR UPDATE;
    INSERT INTO occ.approved_harnesses (harness_id, mode, version, approved_by)
    VALUES (p_harness, p_mode, p_version, p_actor)
    ON CONFLICT (harness_id, mode) DO UPDATE
        SET version = EXCLUDED.version, approved_by = EXCLUDED.approved_by,
            approved_at = clock_timestamp();
    PERFORM occ.audit_admission(p_actor, 'openclaw.harnesses.approve', 'installation',
        occ.installation_id(), NULL, NULL,
        jsonb_build_object('harnessId', p_harness, 'mode', p_mode, 'version', p_version,
                           'previousVersion', previous));
    RETURN jsonb_build_object('id', p_harness, 'mode', p_mode, 'version', p_version,
                              'previousVersion', previous);
END $$;
