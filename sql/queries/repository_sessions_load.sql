-- SPEC G19: a revision's session rows, oldest change first. $1 revision id.
SELECT admission_id::text, repository_ref::text, session_id, phase, material_ref
FROM occ.repository_sessions
WHERE revision_id = $1
ORDER BY updated_at, admission_id
