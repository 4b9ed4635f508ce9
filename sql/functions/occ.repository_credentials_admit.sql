-- SPEC G8: the repository credentials a deployment snapshots into its revision, or null when it
-- names no repository. `p_repositories` is `[{repositoryRef, scope?}]` (scope `read` unless
-- given). Bad input (SQLSTATE 22023, the CLI's exit 2): a malformed list, REF or scope, a REF
-- twice, `--standing` with a deadline, either without a repository, a deadline outside 1 minute
-- to 7 days. Refusals (exit 1): no sender selected, a REF not granted to the Namespace or
-- granted below its scope (`write` covers `read`), `--standing` without the Agent's standing
-- approval of the first REF. `deadlineAt` is the database clock plus the deadline (8 hours
-- unless given), RFC 3339 UTC with milliseconds.
CREATE OR REPLACE FUNCTION occ.repository_credentials_admit(p_namespace text, p_agent text,
        p_repositories jsonb, p_deadline interval, p_standing boolean, p_sender_id text)
RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    bindings jsonb := '[]'::jsonb;
    b jsonb;
    ref text;
    scope text;
    granted text;
    approval occ.repository_standing_approvals;
    deadline interval := coalesce(p_deadline, interval '8 hours');
BEGIN
    IF p_repositories IS NULL OR p_repositories = '[]'::jsonb THEN
        IF coalesce(p_standing, false) OR p_deadline IS NOT NULL THEN
            RAISE EXCEPTION '--standing and --repository-deadline need a --repository'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NULL;
    END IF;
    IF coalesce(p_standing, false) AND p_deadline IS NOT NULL THEN
        RAISE EXCEPTION 'repository credentials have a deadline or a standing approval, not both (--repository-deadline or --standing)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(p_repositories) <> 'array' THEN
        RAISE EXCEPTION 'repositories must be a JSON array of {"repositoryRef", "scope"}'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR b IN SELECT e FROM jsonb_array_elements(p_repositories) e LOOP
        IF jsonb_typeof(b) <> 'object' OR b - 'repositoryRef' - 'scope' <> '{}'::jsonb
           OR jsonb_typeof(b -> 'repositoryRef') IS DISTINCT FROM 'string'
           OR (b ? 'scope' AND jsonb_typeof(b -> 'scope') <> 'string') THEN
            RAISE EXCEPTION 'repositories must be a JSON array of {"repositoryRef", "scope"}'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        ref := b ->> 'repositoryRef';
        scope := coalesce(b ->> 'scope', 'read');
        PERFORM occ.repository_input(ref, scope);
        IF bindings @> jsonb_build_array(jsonb_build_object('repositoryRef', ref)) THEN
            RAISE EXCEPTION 'repository % is named twice', ref
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        bindings := bindings || jsonb_build_array(
            jsonb_build_object('repositoryRef', ref, 'scope', scope));
    END LOOP;
    IF jsonb_array_length(bindings) > 64 THEN
        RAISE EXCEPTION 'a deployment names at most 64 repositories'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT coalesce(p_standing, false)
       AND (deadline < interval '1 minute' OR deadline > interval '7 days') THEN
        RAISE EXCEPTION 'repository deadline % is outside 1 minute to 7 days', deadline
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_sender_id IS NULL OR length(btrim(p_sender_id)) = 0 THEN
        RAISE EXCEPTION 'no repository sender is selected (repositorySender in OCC_INSTALLATION_CONFIG), so no repository credentials can be admitted'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    FOR b IN SELECT e FROM jsonb_array_elements(bindings) e LOOP
        SELECT g.scope INTO granted FROM occ.repository_grants g
        WHERE g.namespace_id = p_namespace AND g.repository_ref = b ->> 'repositoryRef' FOR SHARE;
        IF granted IS NULL THEN
            RAISE EXCEPTION 'repository % is not granted to Namespace % (admin repository grant)',
                b ->> 'repositoryRef', p_namespace USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        IF granted = 'read' AND b ->> 'scope' = 'write' THEN
            RAISE EXCEPTION 'repository % is granted to Namespace % for read only, not write',
                b ->> 'repositoryRef', p_namespace USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
    END LOOP;
    IF coalesce(p_standing, false) THEN
        SELECT * INTO approval FROM occ.repository_standing_approvals s
        WHERE s.namespace_id = p_namespace AND s.agent_id = p_agent
          AND s.repository_ref = bindings -> 0 ->> 'repositoryRef' FOR SHARE;
        IF approval.id IS NULL THEN
            RAISE EXCEPTION 'agent %/% has no standing approval of repository % (admin repository approve)',
                p_namespace, p_agent, bindings -> 0 ->> 'repositoryRef'
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        RETURN jsonb_build_object('senderId', p_sender_id, 'bindings', bindings,
            'standingApprovalId', approval.id, 'standingApprovalGeneration', approval.generation,
            'standingApprovalScopeFingerprint', approval.scope_fingerprint);
    END IF;
    RETURN jsonb_build_object('senderId', p_sender_id, 'bindings', bindings,
        'deadlineAt', to_char((clock_timestamp() + deadline) AT TIME ZONE 'UTC',
                              'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
END $$;
