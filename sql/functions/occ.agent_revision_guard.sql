-- The guard of a revision insert or update; a harness auth's Secret-source check applies to the
-- two methods that name one (the `credential_source` method's shape is the CHECK's).
CREATE OR REPLACE FUNCTION occ.agent_revision_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
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
    -- SPEC R1: an Agent with an explicit execution mode runs only revisions in that mode.
    IF a.execution_mode IS NOT NULL AND NEW.execution_mode IS DISTINCT FROM a.execution_mode THEN
        RAISE EXCEPTION 'revision must run in the execution mode of agent % (%)', a.id, a.execution_mode
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
    -- SPEC G8: each repository binding names a REF, and no REF twice (the rest of the shape is
    -- agent_revisions_repository_credentials_check's).
    IF NEW.repository_credentials IS NOT NULL AND jsonb_typeof(NEW.repository_credentials -> 'bindings') = 'array' AND (
        EXISTS (SELECT 1 FROM jsonb_array_elements(NEW.repository_credentials -> 'bindings') b
                WHERE jsonb_typeof(b -> 'repositoryRef') = 'string'
                  AND NOT occ.is_repository_ref(b ->> 'repositoryRef'))
        OR (SELECT count(DISTINCT b ->> 'repositoryRef') <> count(b ->> 'repositoryRef')
            FROM jsonb_array_elements(NEW.repository_credentials -> 'bindings') b)) THEN
        RAISE EXCEPTION 'repository credentials must bind each repository once, by a REF (HOST/PATH)'
            USING ERRCODE = 'check_violation';
    END IF;
    -- A `credential_source` or `runtime` (SPEC M5) harness auth names no Secret source; its
    -- shape is agent_revisions_harness_auth_check's.
    IF NEW.harness_auth IS NOT NULL
       AND NEW.harness_auth->>'method' NOT IN ('credential_source', 'runtime') AND (
        jsonb_typeof(NEW.harness_auth->'source'->'namespaceId') IS DISTINCT FROM 'string'
        OR jsonb_typeof(NEW.harness_auth->'source'->'id') IS DISTINCT FROM 'string') THEN
        RAISE EXCEPTION 'harness auth source must name a namespaceId and id' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $_$;
