-- Renews the lease of the current live claim only (Q5); returns the work's age by the
-- database clock. Zero rows: the claim is lost.
-- $1 id, $2 claim token, $3 lease in milliseconds.
UPDATE occ.work
SET lease_expires_at = clock_timestamp() + make_interval(secs => $3::bigint / 1000.0),
    updated_at = clock_timestamp()
WHERE id = $1 AND claim_token = $2::text::uuid AND state = 'claimed'
  AND lease_expires_at > clock_timestamp()
RETURNING (extract(epoch FROM clock_timestamp() - created_at) * 1000)::bigint AS age_ms
