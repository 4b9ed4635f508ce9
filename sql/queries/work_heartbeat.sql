-- Renews the lease of the current live claim only (Q5); returns the work's age by the
-- database clock. Zero rows: the claim is lost. Only the lane row is written (V14): two
-- unindexed columns, a HOT update.
-- $1 id, $2 claim token, $3 lease in milliseconds.
UPDATE occ.work_lanes l
SET lease_expires_at = clock_timestamp() + make_interval(secs => $3::bigint / 1000.0),
    renewed_at = clock_timestamp()
FROM occ.work w
WHERE w.id = $1 AND l.lane = w.lane AND l.claim_id = w.id AND l.claim_token = $2::text::uuid
  AND l.lease_expires_at > clock_timestamp()
RETURNING (extract(epoch FROM clock_timestamp() - w.created_at) * 1000)::bigint AS age_ms
