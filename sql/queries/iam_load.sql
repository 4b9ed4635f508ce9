-- The current IAM policy in one snapshot (one statement, one MVCC snapshot): identities,
-- bindings with their roles, restrictions. Loaded before every authorization decision.
SELECT jsonb_build_object(
    'identities', coalesce((SELECT jsonb_agg(jsonb_build_object(
        'id', id, 'kind', kind, 'namespaceId', namespace_id, 'agentId', agent_id))
        FROM occ.identities), '[]'::jsonb),
    'bindings', coalesce((SELECT jsonb_agg(jsonb_build_object(
        'id', b.id, 'principalId', b.principal_id, 'roleId', b.role_id,
        'actions', r.actions, 'resourceKinds', r.resource_kinds,
        'scopeKind', b.scope_kind, 'namespaceId', b.namespace_id,
        'resourceKind', b.resource_kind, 'resourceId', b.resource_id))
        FROM occ.iam_bindings b JOIN occ.iam_roles r ON r.id = b.role_id), '[]'::jsonb),
    'restrictions', coalesce((SELECT jsonb_agg(jsonb_build_object(
        'id', id, 'principalId', principal_id, 'actions', actions,
        'scopeKind', scope_kind, 'namespaceId', namespace_id,
        'resourceKind', resource_kind, 'resourceId', resource_id))
        FROM occ.iam_restrictions), '[]'::jsonb))
