-- Each revision stores its execution admission (SPEC Z1). Forward-only; never edit once landed.
--
-- `{version, mode}`: a positive integer and a lower-case mode of at most 32 characters, and
-- nothing else. Rust admits no egress plan or Git (SPEC §17), so every revision is admitted as
-- `{version: 5, mode: standard}`: the column default stamps it on every revision
-- `occ.agent_deploy` admits, and on every revision already stored. The worker decides it again
-- on every pass, against its Compute Driver's own list or its own check (SPEC Z1, C1).
ALTER TABLE occ.agent_revisions
    ADD COLUMN execution_admission jsonb NOT NULL DEFAULT '{"version": 5, "mode": "standard"}'::jsonb,
    ADD CONSTRAINT agent_revisions_execution_admission_check CHECK (
        jsonb_typeof(execution_admission) = 'object'
        AND execution_admission ?& ARRAY['version', 'mode']
        AND execution_admission - 'version' - 'mode' = '{}'::jsonb
        AND jsonb_typeof(execution_admission -> 'version') = 'number'
        AND (execution_admission ->> 'version') ~ '^[1-9][0-9]{0,8}$'
        AND jsonb_typeof(execution_admission -> 'mode') = 'string'
        AND (execution_admission ->> 'mode') ~ '^[a-z][a-z_]{0,31}$'
    );
