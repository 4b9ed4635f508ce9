-- Operator reads: one identity ($1) with its groups, the bindings naming it or one of its
-- groups, and the restrictions that apply to it; NULL when there is no such identity.
SELECT jsonb_build_object(
    'id', i.id, 'kind', i.kind, 'namespaceId', i.namespace_id, 'agentId', i.agent_id,
    'createdAt', to_char(i.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    'groups', coalesce((SELECT jsonb_agg(m.group_id ORDER BY m.group_id)
                        FROM occ.iam_group_members m WHERE m.identity_id = i.id), '[]'),
    'bindings', coalesce((
        SELECT jsonb_agg(jsonb_build_object(
            'id', b.id, 'role', b.role_id,
            'via', CASE WHEN b.group_id IS NULL THEN 'direct' ELSE 'group:' || b.group_id END,
            'scope', CASE b.scope_kind
                WHEN 'installation' THEN 'installation'
                WHEN 'namespace' THEN 'namespace:' || coalesce(n.name, b.namespace_id)
                ELSE b.resource_kind || ':' || coalesce(n.name, b.namespace_id) || '/' || b.resource_id END)
            ORDER BY b.id)
        FROM occ.iam_bindings b LEFT JOIN occ.namespaces_all n ON n.id = b.namespace_id
        WHERE b.principal_id = i.id
           OR b.group_id IN (SELECT group_id FROM occ.iam_group_members WHERE identity_id = i.id)), '[]'),
    'restrictions', coalesce((
        SELECT jsonb_agg(jsonb_build_object(
            'id', r.id, 'actions', to_jsonb(r.actions),
            'via', CASE WHEN r.principal_id IS NOT NULL THEN 'direct'
                        WHEN r.group_id IS NOT NULL THEN 'group:' || r.group_id
                        ELSE 'everyone' END,
            'scope', CASE r.scope_kind
                WHEN 'installation' THEN 'installation'
                WHEN 'namespace' THEN 'namespace:' || coalesce(n.name, r.namespace_id)
                ELSE r.resource_kind || ':' || coalesce(n.name, r.namespace_id) || '/' || r.resource_id END)
            ORDER BY r.id)
        FROM occ.iam_restrictions r LEFT JOIN occ.namespaces_all n ON n.id = r.namespace_id
        WHERE r.principal_id = i.id
           OR r.group_id IN (SELECT group_id FROM occ.iam_group_members WHERE identity_id = i.id)
           OR (r.principal_id IS NULL AND r.group_id IS NULL)), '[]'))
FROM occ.identities i
WHERE i.id = $1
