-- Completes a finalizer batch's live claims in one statement (Q1, Q11, issue 10 item 4) and
-- records each one's evidence, as work_complete.sql does for one: a work missing from the
-- answer lost its claim. One statement instead of one per work: PostgreSQL prepares the
-- table's checks and triggers once per statement, not once per row.
-- $1 ids, $2 claim tokens, $3 reason codes, $4 result data (aligned; NULL for none).
WITH b AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::jsonb[]) AS b(id, token, code, data)
), done AS (
    UPDATE occ.work w
    SET state = 'succeeded', reason_code = b.code, result_data = b.data,
        claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL,
        completed_at = clock_timestamp(), updated_at = clock_timestamp()
    FROM b
    WHERE w.id = b.id AND w.claim_token = b.token::uuid AND w.state = 'claimed'
      AND w.lease_expires_at > clock_timestamp()
    RETURNING w.id, w.attempt_count, b.code
)
INSERT INTO occ.work_attempts (work_id, attempt, code, outcome)
SELECT id, attempt_count, code, 'succeeded' FROM done ORDER BY id
RETURNING work_id
