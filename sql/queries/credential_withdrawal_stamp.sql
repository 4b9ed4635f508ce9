-- Inside a withdrawal's finalizing transaction (SPEC E9): each attempt stamps its row's
-- `last_reason` and `last_at`; a revoked one also sets `state = revoked` and `revoked_at`. These
-- commit even when the pass retries.
-- $1 namespace id, $2 revision id, $3 source ids, $4 reason codes, $5 revoked flags (one each).
UPDATE occ.credential_withdrawals w
SET last_reason = a.reason,
    last_at = clock_timestamp(),
    state = CASE WHEN a.revoked THEN 'revoked' ELSE w.state END,
    revoked_at = CASE WHEN a.revoked THEN coalesce(w.revoked_at, clock_timestamp())
                      ELSE w.revoked_at END
FROM unnest($3::text[], $4::text[], $5::boolean[]) AS a(source_id, reason, revoked)
WHERE w.namespace_id = $1 AND w.revision_id = $2 AND w.source_id = a.source_id
