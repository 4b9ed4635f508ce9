-- SPEC R1: an Agent's explicit execution mode. `admin agent create --execution-mode` sets it
-- once (NULL: not set, each deployment's `--mode` decides, as before); every deployment
-- snapshots it into the revision's `execution_mode`, and the Harness must be approved in that
-- mode (the catalog approves (Harness, mode) pairs), so a revision's execution mode and harness
-- mode are one value: this CHECK holds every revision to it (every existing row already does,
-- admission stored the harness mode twice). `occ.agent_revision_guard` refuses a revision
-- whose mode is not its Agent's. Forward-only; never edit once landed.
ALTER TABLE occ.agents ADD COLUMN execution_mode text NULL
    CONSTRAINT agents_execution_mode_check CHECK (execution_mode IN ('dedicated', 'embedded'));

ALTER TABLE occ.agent_revisions ADD CONSTRAINT agent_revisions_execution_mode_is_harness_mode
    CHECK (execution_mode = harness_mode);

-- `occ.agent_create` gains `p_execution_mode` (its file in sql/functions/), so its earlier
-- signature goes.
DROP FUNCTION IF EXISTS occ.agent_create(text, text, text);
