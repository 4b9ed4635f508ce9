-- SPEC G19 *prepare*: a new `opening` row for a binding, committed before the sender's `open`
-- it announces; its `admission_id` is the calls' idempotency key.
-- $1 namespace id, $2 agent id, $3 revision id, $4 REF (text: a parameter typed as the
-- `occ.repository_ref` domain would refuse the client's text value before the INSERT runs).
INSERT INTO occ.repository_sessions (namespace_id, agent_id, revision_id, admission_id, repository_ref)
VALUES ($1, $2, $3, gen_random_uuid(), $4::text)
RETURNING admission_id::text
