-- Locks the row of the current live claim inside a finalizing transaction (Q6): every write
-- that follows in the transaction is published only if this returns a row.
-- $1 id, $2 claim token.
SELECT (extract(epoch FROM clock_timestamp() - created_at) * 1000)::bigint AS age_ms
FROM occ.work
WHERE id = $1 AND claim_token = $2::text::uuid AND state = 'claimed'
  AND lease_expires_at > clock_timestamp()
FOR UPDATE
