CREATE OR REPLACE FUNCTION occ.authorize(
    p_principal text, p_action text, p_kind text, p_id text, p_namespace text
) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        WITH ident AS (
            SELECT id FROM occ.identities WHERE id = p_principal
        ), groups AS (
            SELECT m.group_id FROM occ.iam_group_members m WHERE m.identity_id = p_principal
        ), bindings AS (
            SELECT b.id, b.role_id, b.group_id
            FROM (SELECT id, role_id, group_id, scope_kind, namespace_id, resource_kind,
                         resource_id
                  FROM occ.iam_bindings WHERE principal_id = p_principal
                  UNION ALL
                  SELECT id, role_id, group_id, scope_kind, namespace_id, resource_kind,
                         resource_id
                  FROM occ.iam_bindings WHERE group_id IN (SELECT group_id FROM groups)) b
            JOIN occ.iam_roles r ON r.id = b.role_id
            WHERE EXISTS (SELECT 1 FROM ident)
              AND p_action = ANY (r.actions) AND p_kind = ANY (r.resource_kinds)
              AND occ.scope_covers(b.scope_kind, b.namespace_id, b.resource_kind, b.resource_id,
                                   p_kind, p_id, p_namespace)
        ), restrictions AS (
            SELECT x.id, x.group_id
            FROM occ.iam_restrictions x
            WHERE EXISTS (SELECT 1 FROM ident)
              AND ((x.principal_id IS NULL AND x.group_id IS NULL)
                   OR x.principal_id = p_principal
                   OR x.group_id IN (SELECT group_id FROM groups))
              AND p_action = ANY (x.actions)
              AND occ.scope_covers(x.scope_kind, x.namespace_id, x.resource_kind, x.resource_id,
                                   p_kind, p_id, p_namespace)
        )
        SELECT jsonb_build_object(
            'allowed', EXISTS (SELECT 1 FROM ident) AND EXISTS (SELECT 1 FROM bindings)
                       AND NOT EXISTS (SELECT 1 FROM restrictions),
            'reason', CASE
                WHEN NOT EXISTS (SELECT 1 FROM ident) THEN 'NO_IDENTITY'
                WHEN EXISTS (SELECT 1 FROM restrictions) THEN 'RESTRICTED'
                WHEN NOT EXISTS (SELECT 1 FROM bindings) THEN 'NO_MATCHING_BINDING'
                ELSE 'ALLOWED' END,
            'evidence', jsonb_build_object(
                'identityId', (SELECT id FROM ident),
                'groupIds', coalesce((SELECT jsonb_agg(g ORDER BY g COLLATE "C") FROM (
                    SELECT group_id AS g FROM bindings UNION SELECT group_id FROM restrictions) matched
                    WHERE g IS NOT NULL), '[]'::jsonb),
                'bindingIds', coalesce((SELECT jsonb_agg(id ORDER BY id) FROM bindings), '[]'::jsonb),
                'roleIds', coalesce((SELECT jsonb_agg(role_id ORDER BY first) FROM (
                    SELECT role_id, min(id) AS first FROM bindings GROUP BY role_id) roles), '[]'::jsonb),
                'restrictionIds', coalesce((SELECT jsonb_agg(id ORDER BY id) FROM restrictions), '[]'::jsonb)))
    );
END
$$;
