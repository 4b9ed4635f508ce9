-- Completes a finalizer batch's live claims in one statement (Q1, Q11) and
-- records each one's evidence, as work_complete.sql does for one. All or none: when a claim it
-- names is no longer live, the statement fails (V16 `occ.require_live_claims`), so a
-- transaction that sends its COMMIT in the same message never commits a partial batch.
-- One statement instead of one per work: PostgreSQL prepares the table's checks and triggers
-- once per statement, not once per row. Answers the ids completed, in order.
-- $1 ids, $2 claim tokens, $3 reason codes, $4 result data (aligned; NULL for none).
WITH b AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::jsonb[]) AS b(id, token, code, data)
), fence AS (
    SELECT w.id, l.claim_attempt, b.code, b.data
    FROM b
    JOIN occ.work w ON w.id = b.id
    JOIN occ.work_lanes l ON l.lane = w.lane AND l.claim_id = w.id AND l.claim_token = b.token::uuid
    WHERE l.lease_expires_at > clock_timestamp()
    FOR UPDATE OF w FOR KEY SHARE OF l
), done AS (
    UPDATE occ.work w
    SET state = 'succeeded', attempt_count = f.claim_attempt, reason_code = f.code,
        result_data = f.data, completed_at = clock_timestamp(), updated_at = clock_timestamp()
    FROM fence f
    WHERE w.id = f.id
    RETURNING w.id, w.attempt_count, f.code
), evidence AS (
    INSERT INTO occ.work_attempts (work_id, attempt, code, outcome)
    SELECT id, attempt_count, code, 'succeeded' FROM done ORDER BY id
    RETURNING work_id
)
-- One group, even when nothing was completed, so the check always runs.
SELECT unnest(array_agg(work_id ORDER BY work_id)) AS work_id
FROM evidence
HAVING occ.require_live_claims(cardinality($1::bigint[]), count(*))
