-- SPEC E15: a row *needs an attempt* when it is pending, does not await replay, and its
-- revision has no outstanding withdrawal work, so a revision has one chain at a time.
CREATE OR REPLACE FUNCTION occ.credential_withdrawal_needs_attempt(w occ.credential_withdrawals)
    RETURNS boolean
    LANGUAGE sql STABLE
    RETURN w.state = 'pending' AND NOT occ.credential_withdrawal_awaits_replay(w.last_reason)
       AND NOT occ.credential_withdrawal_outstanding(w.agent_id, w.revision_id);
