-- Returns the current live claim to the queue with exponential backoff; the attempt stays
-- spent (Q7). At the attempt limit the work fails instead. The lane's claim is cleared here
-- (V14); the lane trigger then moves the head.
-- $1 id, $2 claim token, $3 code, $4 max attempts, $5 backoff base ms, $6 backoff cap ms.
WITH fence AS (
    SELECT w.id, w.lane, l.claim_attempt
    FROM occ.work w
    JOIN occ.work_lanes l ON l.lane = w.lane AND l.claim_id = w.id
    WHERE w.id = $1 AND l.claim_token = $2::text::uuid AND l.lease_expires_at > clock_timestamp()
    FOR UPDATE OF w FOR KEY SHARE OF l
), released AS (
    UPDATE occ.work_lanes l
    SET claim_id = NULL, claim_token = NULL, claimed_at = NULL, renewed_at = NULL,
        lease_expires_at = NULL, claim_attempt = NULL, claim_worker = NULL,
        claim_host = NULL, claim_pid = NULL
    FROM fence f
    WHERE l.lane = f.lane AND l.claim_id = f.id
), done AS (
    UPDATE occ.work w
    SET state = CASE WHEN f.claim_attempt >= $4 THEN 'failed_permanent' ELSE 'queued' END,
        attempt_count = f.claim_attempt,
        reason_code = CASE WHEN f.claim_attempt >= $4 THEN $3 END,
        completed_at = CASE WHEN f.claim_attempt >= $4 THEN clock_timestamp() END,
        available_at = clock_timestamp() + make_interval(secs =>
            least($6::bigint, $5::bigint * power(2, least(f.claim_attempt - 1, 30))) / 1000.0),
        updated_at = clock_timestamp()
    FROM fence f
    WHERE w.id = f.id
    RETURNING w.id, w.attempt_count, w.state
)
INSERT INTO occ.work_attempts (work_id, attempt, code, outcome)
SELECT id, attempt_count, $3, CASE state WHEN 'queued' THEN 'retry' ELSE 'failed' END FROM done
RETURNING work_id, (SELECT state = 'queued' FROM done) AS requeued
