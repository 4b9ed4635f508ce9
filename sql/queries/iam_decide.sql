-- The authorization decisions one pass needs, in one statement (one MVCC snapshot; the STABLE
-- occ.authorize sees the statement's): for each request, in order ($1..$5: principal, action,
-- resource kind, resource id, resource Namespace), occ.authorize's {allowed, reason,
-- evidence}; and the identities named in $6 that exist (principal checks: revoked actor,
-- service principal owner).
SELECT
    coalesce((SELECT jsonb_agg(occ.authorize(r.principal, r.action, r.kind, r.id, r.namespace)
                               ORDER BY r.ord)
              FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
                   WITH ORDINALITY AS r(principal, action, kind, id, namespace, ord)),
             '[]'::jsonb) AS decisions,
    coalesce((SELECT jsonb_agg(jsonb_build_object(
                  'id', i.id, 'kind', i.kind, 'namespaceId', i.namespace_id, 'agentId', i.agent_id)
                  ORDER BY i.id)
              FROM occ.identities i WHERE i.id = ANY ($6::text[])),
             '[]'::jsonb) AS identities
