-- SPEC G19: one phase change of a session row. $1 admission id, $2 the new phase.
UPDATE occ.repository_sessions
SET phase = $2, updated_at = clock_timestamp()
WHERE admission_id = $1::text::uuid AND phase IS DISTINCT FROM $2
