-- Every revision of one Agent (or exactly one, when $3 is not NULL), oldest first, with
-- whether it was admitted before the work $4 was created, and its Secret bindings and
-- `secret` harness auth resolved to the Secrets' metadata (never a value; a binding whose
-- Secret is gone, or names another Namespace, is left out), with each Secret's driver and uid
-- and the revision's frozen Secret Driver (SPEC Z4), its execution admission (SPEC Z1) and
-- its pinned Sandbox Driver and facets (S2), its credential source snapshot (SPEC §13) and
-- its repository credentials (SPEC §19).
-- $1 namespace id, $2 agent id, $3 revision id (nullable), $4 work id.
SELECT r.id, r.namespace_id, r.agent_id, r.revision, r.actor_id, r.service_principal_id,
       r.configuration_id, r.configuration_generation, r.document, r.harness_id,
       r.harness_version, r.harness_mode, r.execution_mode, r.compute_id,
       r.compute_implementation, r.harness_auth, r.secret_bindings, r.plugins,
       r.retired_at IS NOT NULL AS retired,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('binding', b.key, 'id', s.id, 'backendRef', s.backend_ref,
                                                    'driverId', s.driver_id, 'uid', s.uid)
                                  ORDER BY b.key), '[]'::jsonb)
          FROM jsonb_each(r.secret_bindings) b
          JOIN occ.secrets s ON s.namespace_id = r.namespace_id AND s.id = b.value->>'id'
         WHERE b.value->>'namespaceId' = r.namespace_id) AS secrets,
       (SELECT jsonb_build_object('binding', 'harnessAuth', 'id', s.id, 'backendRef', s.backend_ref,
                                  'driverId', s.driver_id, 'uid', s.uid)
          FROM occ.secrets s
         WHERE r.harness_auth->>'method' = 'secret'
           AND r.harness_auth->'source'->>'namespaceId' = r.namespace_id
           AND s.namespace_id = r.namespace_id AND s.id = r.harness_auth->'source'->>'id') AS harness_secret,
       r.created_at <= coalesce((SELECT w.created_at FROM occ.work w WHERE w.id = $4), clock_timestamp())
           AS admitted_before_work,
       r.backend_id,
       r.secret_driver_id,
       r.execution_admission,
       r.sandbox_driver_id,
       r.sandbox_facets,
       r.credential_sources,
       r.repository_credentials
FROM occ.agent_revisions r
WHERE r.namespace_id = $1 AND r.agent_id = $2 AND ($3::text IS NULL OR r.id = $3)
ORDER BY r.revision
