-- SPEC §12, G1: the repository cleanup work kind. A row names its Agent and revision with
-- target `repository_cleanup` (fully owned AgentRevision work), key
-- `agent_revision:<rev>:repository_cleanup:<kind>`, one row per (revision, kind); its
-- operation is `agent_repository_cleanup`, dispatched after sandbox policy and before
-- credential withdrawal (Q2x). The key rule is `occ.work_key_check` (sql/functions/).

ALTER TABLE occ.work DROP CONSTRAINT work_agent_target_check;
ALTER TABLE occ.work ADD CONSTRAINT work_agent_target_check
    CHECK (agent_target = ANY (ARRAY['stopped'::text, 'deleted'::text, 'sandbox_policy'::text,
                                     'credential_withdrawal'::text, 'repository_cleanup'::text]));
ALTER TABLE occ.work DROP CONSTRAINT work_shape;
ALTER TABLE occ.work ADD CONSTRAINT work_shape CHECK (
    (namespace_target IS NOT NULL AND agent_id IS NULL AND agent_target IS NULL
     AND revision_id IS NULL)
    OR (agent_id IS NOT NULL AND agent_target IS NOT NULL
        AND agent_target NOT IN ('credential_withdrawal', 'repository_cleanup')
        AND namespace_target IS NULL AND revision_id IS NULL)
    OR (agent_id IS NOT NULL AND revision_id IS NOT NULL AND namespace_target IS NULL
        AND agent_target IS NULL)
    OR (agent_id IS NOT NULL AND revision_id IS NOT NULL AND namespace_target IS NULL
        AND agent_target IN ('credential_withdrawal', 'repository_cleanup')));

-- The views over `operation` go while it is redefined; `migrate` applies them again from
-- sql/views/ after the migrations.
DROP VIEW occ.revision_status;
DROP VIEW occ.work_status;
ALTER TABLE occ.work DROP COLUMN operation;
ALTER TABLE occ.work ADD COLUMN operation text GENERATED ALWAYS AS (
CASE
    WHEN (agent_target = 'sandbox_policy'::text) THEN 'agent_sandbox_policy'::text
    WHEN (agent_target = 'repository_cleanup'::text) THEN 'agent_repository_cleanup'::text
    WHEN (agent_target = 'credential_withdrawal'::text) THEN 'agent_credential_withdrawal'::text
    WHEN (revision_id IS NOT NULL AND idempotency_key ~~ 'agent_revision:%:maintenance:%'::text) THEN 'revision_maintenance'::text
    WHEN (revision_id IS NOT NULL) THEN 'revision_reconcile'::text
    WHEN (agent_target = 'stopped'::text) THEN 'agent_stop'::text
    WHEN (agent_target = 'deleted'::text) THEN 'agent_delete'::text
    WHEN (namespace_target = 'ready'::text) THEN 'namespace_ensure'::text
    WHEN (namespace_target = 'deleted'::text) THEN 'namespace_delete'::text
END) STORED;

-- SPEC G3: a pending repository cleanup's deferral evidence keeps the cause it waits on (a
-- reason code or an error class), for `admin work show`.
ALTER TABLE occ.work_attempts ADD COLUMN cause text NULL
    CONSTRAINT work_attempts_cause_check CHECK (cause ~ '^[A-Za-z][A-Za-z0-9_]{0,63}$');
