-- Operator reads: one IAM group ($1) with its members and the bindings naming it; NULL when
-- there is no such group.
SELECT jsonb_build_object(
    'id', g.id,
    'createdAt', to_char(g.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'members', coalesce((SELECT jsonb_agg(m.identity_id ORDER BY m.identity_id)
                         FROM occ.iam_group_members m WHERE m.group_id = g.id), '[]'),
    'bindings', coalesce((
        SELECT jsonb_agg(jsonb_build_object(
            'id', b.id, 'role', b.role_id,
            'scope', CASE b.scope_kind
                WHEN 'installation' THEN 'installation'
                WHEN 'namespace' THEN 'namespace:' || coalesce(n.name, b.namespace_id)
                ELSE b.resource_kind || ':' || coalesce(n.name, b.namespace_id) || '/' || b.resource_id END)
            ORDER BY b.id)
        FROM occ.iam_bindings b LEFT JOIN occ.namespaces_all n ON n.id = b.namespace_id
        WHERE b.group_id = g.id), '[]'))
FROM occ.iam_groups g
WHERE g.id = $1
