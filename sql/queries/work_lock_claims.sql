-- Locks a finalizer batch's live claims in one statement (Q6), as
-- work_lock_claim.sql does for one: every write that follows in the transaction for a work is
-- published only if its id is returned; a work missing from the answer lost its claim.
-- $1 ids, $2 claim tokens (aligned).
SELECT w.id
FROM unnest($1::bigint[], $2::text[]) AS b(id, token)
JOIN occ.work w ON w.id = b.id
JOIN occ.work_lanes l ON l.lane = w.lane AND l.claim_id = w.id AND l.claim_token = b.token::uuid
WHERE l.lease_expires_at > clock_timestamp()
ORDER BY w.id
FOR UPDATE OF w FOR KEY SHARE OF l
