-- Operator reads: every IAM role and what it grants. occ.authorize allows an action on a
-- resource kind through a binding whose role lists both, so a role grants each of its actions
-- on each of its resource kinds (within the binding's scope). Widest first.
SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', r.id,
        'actions', to_jsonb(r.actions),
        'resourceKinds', to_jsonb(r.resource_kinds),
        'builtin', r.builtin)
    ORDER BY cardinality(r.actions) * cardinality(r.resource_kinds) DESC, r.id), '[]')
FROM occ.iam_roles r
