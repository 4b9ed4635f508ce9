-- SPEC §19 Data, G8, G19: repository credentials. A revision's snapshot of its repository
-- bindings and its standing approval or deadline; the built-in repository policy (grants per
-- Namespace, standing approvals per Agent and REF); the sessions a repository sender opens for
-- a revision and the execution captured for it. Forward-only; never edit once landed.
--
-- A REF is `HOST/PATH`: a lower-case host (optional `:PORT`), then `/`-separated segments of
-- `A-Za-z0-9._-` (neither `.` nor `..`, [D]: a path that climbs is no repository), at most 256
-- characters. The domain holds the rule for the table columns; `occ.is_repository_ref`
-- (sql/functions/) states the same rule for jsonb and admission, since a migration defines no
-- function and a CHECK can only name a function that exists when it is created.
CREATE DOMAIN occ.repository_ref AS text
    CONSTRAINT repository_ref_check CHECK (
        length(VALUE) <= 256
        AND VALUE ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?(/(?!\.{1,2}(/|$))[A-Za-z0-9._-]+)+$');

-- The snapshot admission writes (SPEC G8): `{senderId, bindings: [{repositoryRef, scope}],
-- standingApprovalId, standingApprovalGeneration, standingApprovalScopeFingerprint}` or
-- `{senderId, bindings, deadlineAt}` (RFC 3339 UTC with milliseconds, on the database clock).
-- The shape is this CHECK's; each binding's REF rule and the absence of a repeated REF need a
-- look at every element, which is `occ.agent_revision_guard`'s (as plugins and secret bindings).
ALTER TABLE occ.agent_revisions ADD COLUMN repository_credentials jsonb NULL
    CONSTRAINT agent_revisions_repository_credentials_check CHECK (
        repository_credentials IS NULL OR coalesce(
            jsonb_typeof(repository_credentials) = 'object'
            AND repository_credentials - ARRAY['senderId', 'bindings', 'standingApprovalId',
                'standingApprovalGeneration', 'standingApprovalScopeFingerprint',
                'deadlineAt'] = '{}'::jsonb
            AND jsonb_typeof(repository_credentials -> 'senderId') = 'string'
            AND length(btrim(repository_credentials ->> 'senderId')) > 0
            AND length(repository_credentials ->> 'senderId') <= 128
            AND jsonb_typeof(repository_credentials -> 'bindings') = 'array'
            AND jsonb_array_length(repository_credentials -> 'bindings') BETWEEN 1 AND 64
            -- Every binding an object (strict: an array is not unwrapped), with a string
            -- `repositoryRef` and a scope `read` or `write` (lax: a missing key is no match).
            AND NOT jsonb_path_exists(repository_credentials,
                'strict $.bindings[*] ? (@.type() != "object")', '{}', true)
            AND NOT jsonb_path_exists(repository_credentials,
                '$.bindings[*] ? (!(@.repositoryRef.type() == "string")
                                  || !(@.scope.type() == "string")
                                  || !(@.scope == "read" || @.scope == "write"))',
                '{}', true)
            AND NOT jsonb_path_exists(repository_credentials,
                '$.bindings[*].keyvalue() ? (@.key != "repositoryRef" && @.key != "scope")',
                '{}', true)
            AND CASE WHEN repository_credentials ? 'deadlineAt' THEN
                    NOT repository_credentials ?| ARRAY['standingApprovalId',
                        'standingApprovalGeneration', 'standingApprovalScopeFingerprint']
                    AND jsonb_typeof(repository_credentials -> 'deadlineAt') = 'string'
                    AND repository_credentials ->> 'deadlineAt'
                        ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$'
                ELSE
                    repository_credentials ?& ARRAY['standingApprovalId',
                        'standingApprovalGeneration', 'standingApprovalScopeFingerprint']
                    AND jsonb_typeof(repository_credentials -> 'standingApprovalId') = 'string'
                    AND repository_credentials ->> 'standingApprovalId'
                        ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                    AND jsonb_typeof(repository_credentials -> 'standingApprovalGeneration') = 'number'
                    AND repository_credentials ->> 'standingApprovalGeneration' ~ '^[1-9][0-9]{0,17}$'
                    AND jsonb_typeof(repository_credentials -> 'standingApprovalScopeFingerprint') = 'string'
                    AND repository_credentials ->> 'standingApprovalScopeFingerprint' ~ '^[0-9a-f]{64}$'
                END,
            false));

-- SPEC G19 (the policy's `resolve`): what the Namespace's Agents may be granted, one row per
-- (Namespace, REF); a grant again sets the scope (`created_by`/`created_at` name the latest).
-- Namespace state, kept with the Namespace's tombstone like its Configurations and Secrets.
CREATE TABLE occ.repository_grants (
    namespace_id text NOT NULL REFERENCES occ.namespaces_all (id),
    repository_ref occ.repository_ref NOT NULL,
    scope text NOT NULL CONSTRAINT repository_grants_scope_check CHECK (scope IN ('read', 'write')),
    created_by text NOT NULL CHECK (length(created_by) > 0),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (namespace_id, repository_ref)
);

-- SPEC G15, G19: an operator's standing approval of an Agent's access to a REF, one per
-- (Namespace, Agent, REF), Agent state (it goes with the Agent). `id` is new when the approval
-- is created; another scope raises `generation` and changes `scope_fingerprint`, the hex
-- SHA-256 of `<REF>\n<scope>`, which the CHECK recomputes.
CREATE TABLE occ.repository_standing_approvals (
    namespace_id text NOT NULL,
    agent_id text NOT NULL,
    repository_ref occ.repository_ref NOT NULL,
    id uuid NOT NULL UNIQUE,
    generation bigint NOT NULL CHECK (generation > 0),
    scope text NOT NULL
        CONSTRAINT repository_standing_approvals_scope_check CHECK (scope IN ('read', 'write')),
    scope_fingerprint text NOT NULL,
    approved_by text NOT NULL CHECK (length(approved_by) > 0),
    approved_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (namespace_id, agent_id, repository_ref),
    FOREIGN KEY (namespace_id, agent_id) REFERENCES occ.agents (namespace_id, id) ON DELETE CASCADE,
    CONSTRAINT repository_standing_approvals_fingerprint_check CHECK (scope_fingerprint
        = encode(sha256(convert_to(repository_ref || E'\n' || scope, 'UTF8')), 'hex'))
);

-- SPEC G19: a revision's sessions. Each phase change is its own claim-fenced write committed
-- before the sender call it announces; `admission_id` is the calls' idempotency key. An `open`
-- row names its session and its material, a Secret `NAMESPACE/NAME/KEY` in the Agent's
-- Kubernetes namespace that the worker never reads; at most one live (`opening` or `open`) row
-- per revision and REF. Removed with the revision.
CREATE TABLE occ.repository_sessions (
    namespace_id text NOT NULL,
    agent_id text NOT NULL,
    revision_id text NOT NULL,
    admission_id uuid PRIMARY KEY,
    repository_ref occ.repository_ref NOT NULL,
    session_id text NULL
        CONSTRAINT repository_sessions_session_id_check
        CHECK (session_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'),
    phase text NOT NULL DEFAULT 'opening'
        CONSTRAINT repository_sessions_phase_check
        CHECK (phase IN ('opening', 'open', 'closing', 'invalidated', 'disposed')),
    material_ref text NULL
        CONSTRAINT repository_sessions_material_ref_check CHECK (
            length(material_ref) <= 571
            AND material_ref ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[-._a-zA-Z0-9]{1,253}$'),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    FOREIGN KEY (revision_id, agent_id, namespace_id)
        REFERENCES occ.agent_revisions (id, agent_id, namespace_id) ON DELETE CASCADE,
    CONSTRAINT repository_sessions_open_check
        CHECK (phase <> 'open' OR (session_id IS NOT NULL AND material_ref IS NOT NULL)),
    CONSTRAINT repository_sessions_material_check
        CHECK (material_ref IS NULL OR session_id IS NOT NULL)
);
CREATE UNIQUE INDEX repository_sessions_live ON occ.repository_sessions (revision_id, repository_ref)
    WHERE phase IN ('opening', 'open');
CREATE INDEX repository_sessions_agent ON occ.repository_sessions (namespace_id, agent_id);

-- SPEC G11, G19 (`captureExecution`): what `verify_repository_execution` answered for a ready
-- revision, replaced on each capture, removed with the revision.
CREATE TABLE occ.repository_executions (
    namespace_id text NOT NULL,
    revision_id text PRIMARY KEY REFERENCES occ.agent_revisions (id) ON DELETE CASCADE,
    execution jsonb NOT NULL
        CONSTRAINT repository_executions_execution_check CHECK (
            jsonb_typeof(execution) IN ('object', 'array')
            AND octet_length(execution::text) <= 65536),
    captured_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- `occ.agent_deploy` gains the repository parameters (its file in sql/functions/), so its
-- earlier signature goes: a database that ran `migrate` has it from that file; a fresh one,
-- migrating from V1, has not yet applied the files.
DROP FUNCTION IF EXISTS occ.agent_deploy(text, text, text, text, text, text, text, text, text, jsonb,
    jsonb, text, text, text, jsonb, text, text[], text, boolean);
