-- SPEC WS1: an Agent's workspace setup, at most one per Agent, Agent state (it goes with the
-- Agent). `id` is new on every put; `document` is opaque to the worker and read by the setup
-- container, so it carries no secret value; the record is completed only in the fenced
-- transaction of an activation (WS4), by the database clock.
CREATE TABLE occ.workspace_setups (
    agent_id text PRIMARY KEY REFERENCES occ.agents (id) ON DELETE CASCADE,
    namespace_id text NOT NULL,
    id text NOT NULL CHECK (id ~ '^ws-[0-9a-f]{8}$'),
    document jsonb NOT NULL
        CONSTRAINT workspace_setups_document_check
        CHECK (jsonb_typeof(document) = 'object' AND octet_length(document::text) <= 65536),
    created_by text NOT NULL CHECK (length(created_by) > 0),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at timestamptz,
    completed_revision_id text,
    CONSTRAINT workspace_setups_completion_check
        CHECK ((completed_at IS NULL) = (completed_revision_id IS NULL))
);
