-- The current IAM policy in one snapshot (one statement, one MVCC snapshot): identities with
-- their group memberships, bindings with their roles, restrictions. A binding or restriction
-- names an identity (principalId), a group (groupId), or, for a restriction, neither
-- (everyone). Loaded before every authorization decision.
SELECT jsonb_build_object(
    'identities', coalesce((SELECT jsonb_agg(jsonb_build_object(
        'id', i.id, 'kind', i.kind, 'namespaceId', i.namespace_id, 'agentId', i.agent_id,
        'groupIds', coalesce((SELECT jsonb_agg(m.group_id ORDER BY m.group_id)
                              FROM occ.iam_group_members m WHERE m.identity_id = i.id), '[]'::jsonb)))
        FROM occ.identities i), '[]'::jsonb),
    'bindings', coalesce((SELECT jsonb_agg(jsonb_build_object(
        'id', b.id, 'principalId', b.principal_id, 'groupId', b.group_id, 'roleId', b.role_id,
        'actions', r.actions, 'resourceKinds', r.resource_kinds,
        'scopeKind', b.scope_kind, 'namespaceId', b.namespace_id,
        'resourceKind', b.resource_kind, 'resourceId', b.resource_id) ORDER BY b.id)
        FROM occ.iam_bindings b JOIN occ.iam_roles r ON r.id = b.role_id), '[]'::jsonb),
    'restrictions', coalesce((SELECT jsonb_agg(jsonb_build_object(
        'id', id, 'principalId', principal_id, 'groupId', group_id, 'actions', actions,
        'scopeKind', scope_kind, 'namespaceId', namespace_id,
        'resourceKind', resource_kind, 'resourceId', resource_id) ORDER BY id)
        FROM occ.iam_restrictions), '[]'::jsonb))
