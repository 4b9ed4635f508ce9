-- SPEC E16, in the transaction that completes a candidate's own reconcile work with its
-- activation: a pending row whose last attempt was refused `…_REQUIRES_RUNTIME_RETIREMENT`,
-- of the activated revision $3 (op `activation`) or of an earlier one R6 retired (op
-- `retirement`), with no outstanding withdrawal work, gets one withdrawal work, its requester
-- as actor. The keys enqueued. $1 namespace id, $2 agent id, $3 revision id, $4 its number.
SELECT occ.credential_withdrawal_enqueue($1, $2, f.revision_id, f.requested_by,
           CASE WHEN f.revision_id = $3 THEN 'activation' ELSE 'retirement' END, 0) AS enqueued
FROM (
    SELECT DISTINCT ON (w.revision_id) w.revision_id, w.requested_by
    FROM occ.credential_withdrawals w
    JOIN occ.agent_revisions r ON r.id = w.revision_id
    WHERE w.namespace_id = $1 AND w.agent_id = $2 AND w.state = 'pending'
      AND w.last_reason = 'CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT'
      AND (r.id = $3 OR r.revision < $4)
      AND NOT occ.credential_withdrawal_outstanding(w.agent_id, w.revision_id)
    ORDER BY w.revision_id, w.requested_at, w.source_id
) f
