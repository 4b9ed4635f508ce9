-- SPEC G11, G19 *captureExecution*: what `verify_repository_execution` answered for a ready
-- revision, replacing any. $1 namespace id, $2 revision id, $3 the execution.
INSERT INTO occ.repository_executions (namespace_id, revision_id, execution)
VALUES ($1, $2, $3)
ON CONFLICT (revision_id) DO UPDATE
SET execution = EXCLUDED.execution, captured_at = clock_timestamp()
