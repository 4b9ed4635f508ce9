-- A request that arrived while the withdrawal work $1 ran found it outstanding and queued
-- nothing (SPEC E15); the pass never saw its row. In the transaction that ends $1 for good:
-- the revision's first pending row (of a source that exists) that this pass did not attempt
-- ($2: the source ids it attempted) and that needs an attempt, the work $1 itself not counting
-- as outstanding, gets a fresh withdrawal work, its requester as actor. The new key, or no row.
-- $1 work id, $2 source ids attempted.
WITH w AS (
    SELECT namespace_id, agent_id, revision_id
    FROM occ.work
    WHERE id = $1 AND agent_target = 'credential_withdrawal'
), first_unseen AS (
    SELECT c.requested_by, c.last_reason
    FROM occ.credential_withdrawals c
    JOIN w ON c.namespace_id = w.namespace_id AND c.revision_id = w.revision_id
    WHERE c.state = 'pending' AND NOT c.source_id = ANY ($2::text[])
      AND EXISTS (SELECT 1 FROM occ.credential_sources s
                  WHERE s.namespace_id = c.namespace_id AND s.id = c.source_id)
    ORDER BY occ.credential_withdrawal_awaits_replay(c.last_reason), c.requested_at, c.source_id
    LIMIT 1
)
SELECT occ.credential_withdrawal_enqueue(w.namespace_id, w.agent_id, w.revision_id,
                                         f.requested_by, NULL, 0) AS key
FROM w, first_unseen f
WHERE NOT occ.credential_withdrawal_awaits_replay(f.last_reason)
  AND NOT occ.credential_withdrawal_outstanding(w.agent_id, w.revision_id, $1)
