-- Facts a revision pass needs besides the rows themselves.
-- $1 work id, $2 the revision's reconcile key, $3 the readiness codes, $4 the credential
-- bootstrap's code (SPEC Z3), $5 the namespace id, $6 the agent id.
SELECT
    -- A yielded predecessor stop never touched the candidate (SPEC Z5).
    (SELECT count(*) FROM occ.work_attempts WHERE work_id = $1
        AND code IS DISTINCT FROM 'PREDECESSOR_STOP_YIELDED') AS attempts,
    (SELECT count(*) FROM occ.work_attempts WHERE work_id = $1
        AND code = 'REFUSED_CANDIDATE_STOP_PENDING') AS refused_stop_attempts,
    -- R11: the deployment failed for good or was superseded, which ends a maintenance chain.
    coalesce((SELECT state = 'failed_permanent' OR reason_code = 'REVISION_SUPERSEDED'
              FROM occ.work WHERE idempotency_key = $2), false) AS deployment_ended,
    (SELECT a.refusal FROM occ.work_attempts a WHERE a.work_id = $1
        ORDER BY a.id DESC LIMIT 1) AS stored_refusal,
    (SELECT EXISTS (SELECT 1 FROM occ.work_attempts WHERE work_id = $1
        AND code = 'PREDECESSOR_STOP_YIELDED')) AS predecessor_stop_yielded,
    (SELECT secret_driver_id FROM occ.installation) AS secret_driver,
    (SELECT a.refusal FROM occ.work_attempts a WHERE a.work_id = $1
        AND a.code = 'REFUSED_CANDIDATE_STOP_PENDING' ORDER BY a.id DESC LIMIT 1) AS waited_refusal,
    -- The newest readiness evidence of this work (SPEC Z3): transient failures, retries and
    -- lost claims say nothing about readiness, and a ready pass records none.
    coalesce((SELECT a.code = $4 FROM occ.work_attempts a WHERE a.work_id = $1
        AND a.code = ANY ($3::text[]) ORDER BY a.id DESC LIMIT 1), false) AS bootstrap_last,
    -- R9: the latest attempt is a refused candidate's stop wait whose evidence names no
    -- refusal (it publishes UNKNOWN_FAILURE once the candidate is stopped).
    coalesce((SELECT a.code = 'REFUSED_CANDIDATE_STOP_PENDING' AND a.refusal IS NULL
              FROM occ.work_attempts a WHERE a.work_id = $1
              ORDER BY a.id DESC LIMIT 1), false) AS unnamed_wait,
    -- SPEC WS2, WS3: the Agent's workspace setup, completed or not.
    s.id AS workspace_setup_id,
    s.document AS workspace_setup_document
FROM (SELECT 1) one
LEFT JOIN occ.workspace_setups s ON s.namespace_id = $5 AND s.agent_id = $6
