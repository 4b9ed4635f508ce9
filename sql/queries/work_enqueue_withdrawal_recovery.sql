-- SPEC E12: the next recovery series of the withdrawal work $1, in the transaction that fails
-- it (or right after stale-claim recovery failed it, E13). Enqueued only when the revision's
-- first pending row, preferring one not awaiting replay, needs an attempt (E15:
-- occ.credential_withdrawal_needs_attempt), except that the work $1 itself is not outstanding:
-- a claimed work stays `queued` until the statement that fails it, later in this transaction.
-- Same Namespace, Agent, revision, actor and target; available $3 ms after now on the database
-- clock. The new key, or no row.
-- $1 work id, $2 key suffix `<op>:recovery:<n>`, $3 delay in ms.
WITH w AS (
    SELECT namespace_id, agent_id, revision_id, actor_id
    FROM occ.work
    WHERE id = $1 AND agent_target = 'credential_withdrawal'
), first_pending AS (
    SELECT c.last_reason
    FROM occ.credential_withdrawals c
    JOIN w ON c.namespace_id = w.namespace_id AND c.revision_id = w.revision_id
    WHERE c.state = 'pending'
    ORDER BY occ.credential_withdrawal_awaits_replay(c.last_reason), c.requested_at, c.source_id
    LIMIT 1
)
SELECT occ.credential_withdrawal_enqueue(w.namespace_id, w.agent_id, w.revision_id, w.actor_id,
                                         $2::text, $3::bigint) AS key
FROM w, first_pending f
WHERE NOT occ.credential_withdrawal_awaits_replay(f.last_reason)
  AND NOT occ.credential_withdrawal_outstanding(w.agent_id, w.revision_id, $1)
