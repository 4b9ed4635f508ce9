-- Operator reads: every identity with its groups, oldest first.
SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', i.id, 'kind', i.kind, 'namespaceId', i.namespace_id, 'agentId', i.agent_id,
        'groups', coalesce((SELECT jsonb_agg(m.group_id ORDER BY m.group_id)
                            FROM occ.iam_group_members m WHERE m.identity_id = i.id), '[]'),
        'createdAt', to_char(i.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
    ORDER BY i.created_at, i.id), '[]')
FROM occ.identities i
