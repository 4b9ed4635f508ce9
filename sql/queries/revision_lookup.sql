-- Facts a revision pass needs besides the rows themselves.
-- $1 work id, $2 the revision's reconcile key, $3 namespace id, $4 secret ids (text[]).
SELECT
    (SELECT count(*) FROM occ.work_attempts WHERE work_id = $1) AS attempts,
    (SELECT count(*) FROM occ.work_attempts WHERE work_id = $1
        AND code = 'REFUSED_CANDIDATE_STOP_PENDING') AS refused_stop_attempts,
    (SELECT state FROM occ.work WHERE idempotency_key = $2) AS reconcile_state,
    (SELECT reason_code FROM occ.work WHERE idempotency_key = $2) AS reconcile_code,
    (SELECT count(*) FROM occ.secrets WHERE namespace_id = $3 AND id = ANY ($4::text[])) AS secrets_found,
    (SELECT a.refusal FROM occ.work_attempts a WHERE a.work_id = $1
        ORDER BY a.id DESC LIMIT 1) AS stored_refusal
