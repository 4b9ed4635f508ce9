-- Operator reads: every IAM group with its members.
SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', g.id,
        'members', coalesce((SELECT jsonb_agg(m.identity_id ORDER BY m.identity_id)
                             FROM occ.iam_group_members m WHERE m.group_id = g.id), '[]'),
        'createdAt', to_char(g.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
    ORDER BY g.id), '[]')
FROM occ.iam_groups g
