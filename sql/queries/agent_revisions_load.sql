-- Every revision of one Agent (or exactly one, when $3 is not NULL), oldest first, with
-- whether it was admitted before the work $4 was created.
-- $1 namespace id, $2 agent id, $3 revision id (nullable), $4 work id.
SELECT r.id, r.namespace_id, r.agent_id, r.revision, r.actor_id, r.service_principal_id,
       r.configuration_id, r.configuration_generation, r.document, r.harness_id,
       r.harness_version, r.harness_mode, r.execution_mode, r.compute_id,
       r.compute_implementation, r.harness_auth, r.secret_bindings, r.plugins,
       r.retired_at IS NOT NULL AS retired,
       r.created_at <= coalesce((SELECT w.created_at FROM occ.work w WHERE w.id = $4), clock_timestamp())
           AS admitted_before_work
FROM occ.agent_revisions r
WHERE r.namespace_id = $1 AND r.agent_id = $2 AND ($3::text IS NULL OR r.id = $3)
ORDER BY r.revision
