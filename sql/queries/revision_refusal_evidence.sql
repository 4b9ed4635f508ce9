-- The deferral evidence of a refused candidate whose stop is still pending (R9), written in
-- the finalizing transaction so the refusal survives to the next pass.
-- $1 work id, $2 attempt, $3 refusal code.
INSERT INTO occ.work_attempts (work_id, attempt, code, outcome, refusal)
VALUES ($1, $2, 'REFUSED_CANDIDATE_STOP_PENDING', 'deferred', $3)
