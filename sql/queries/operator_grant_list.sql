-- Operator reads: role bindings, oldest first. $1 a principal (identity id or `group:ID`) and
-- $2 a scope (`installation`, `namespace:NS`, `agent:NS/AGENT`, `secret:NS/ID`,
-- `service_account:NS/ID`, `credential_source:NS/ID`), each nullable; a given one must
-- exist (occ.parse_principal / occ.parse_scope raise otherwise).
WITH f AS (
    SELECT CASE WHEN $1::text IS NOT NULL THEN (occ.parse_principal($1::text)).identity_id END AS identity_id,
           CASE WHEN $1::text IS NOT NULL THEN (occ.parse_principal($1::text)).group_id END AS group_id,
           CASE WHEN $2::text IS NOT NULL THEN (occ.parse_scope($2::text)).scope_kind END AS scope_kind,
           CASE WHEN $2::text IS NOT NULL THEN (occ.parse_scope($2::text)).namespace_id END AS namespace_id,
           CASE WHEN $2::text IS NOT NULL THEN (occ.parse_scope($2::text)).resource_kind END AS resource_kind,
           CASE WHEN $2::text IS NOT NULL THEN (occ.parse_scope($2::text)).resource_id END AS resource_id
)
SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', b.id,
        'principal', coalesce(b.principal_id, 'group:' || b.group_id),
        'role', b.role_id,
        'scope', CASE b.scope_kind
            WHEN 'installation' THEN 'installation'
            WHEN 'namespace' THEN 'namespace:' || coalesce(n.name, b.namespace_id)
            ELSE b.resource_kind || ':' || coalesce(n.name, b.namespace_id) || '/' || b.resource_id END,
        'namespaceId', b.namespace_id,
        'createdAt', to_char(b.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
    ORDER BY b.id), '[]')
FROM f CROSS JOIN occ.iam_bindings b
LEFT JOIN occ.namespaces_all n ON n.id = b.namespace_id
WHERE ($1::text IS NULL OR (b.principal_id IS NOT DISTINCT FROM f.identity_id
                            AND b.group_id IS NOT DISTINCT FROM f.group_id))
  AND ($2::text IS NULL OR (b.scope_kind = f.scope_kind
                            AND b.namespace_id IS NOT DISTINCT FROM f.namespace_id
                            AND b.resource_kind IS NOT DISTINCT FROM f.resource_kind
                            AND b.resource_id IS NOT DISTINCT FROM f.resource_id))
