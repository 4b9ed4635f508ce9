-- SPEC G19 *prepare*: a valid `open` answer makes the `opening` row `open` with its session
-- and material (`NAMESPACE/NAME/KEY`). $1 admission id, $2 session id, $3 material.
UPDATE occ.repository_sessions
SET phase = 'open', session_id = $2, material_ref = $3, updated_at = clock_timestamp()
WHERE admission_id = $1::text::uuid AND phase = 'opening'
