-- Locks the current live claim inside a finalizing transaction (Q6): every write that follows
-- in the transaction is published only if this returns a row. The work row FOR UPDATE, the
-- lane row FOR KEY SHARE: recovery passes the lane by, admission does not wait for it (V14).
-- $1 id, $2 claim token.
SELECT (extract(epoch FROM clock_timestamp() - w.created_at) * 1000)::bigint AS age_ms
FROM occ.work w
JOIN occ.work_lanes l ON l.lane = w.lane AND l.claim_id = w.id
WHERE w.id = $1 AND l.claim_token = $2::text::uuid AND l.lease_expires_at > clock_timestamp()
FOR UPDATE OF w FOR KEY SHARE OF l
