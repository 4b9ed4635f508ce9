-- Facts a revision pass needs besides the rows themselves.
-- $1 work id, $2 the revision's reconcile key.
SELECT
    (SELECT count(*) FROM occ.work_attempts WHERE work_id = $1) AS attempts,
    (SELECT count(*) FROM occ.work_attempts WHERE work_id = $1
        AND code = 'REFUSED_CANDIDATE_STOP_PENDING') AS refused_stop_attempts,
    (SELECT state FROM occ.work WHERE idempotency_key = $2) AS reconcile_state,
    (SELECT reason_code FROM occ.work WHERE idempotency_key = $2) AS reconcile_code,
    (SELECT a.refusal FROM occ.work_attempts a WHERE a.work_id = $1
        ORDER BY a.id DESC LIMIT 1) AS stored_refusal
