-- N4: tombstones a `deleting` Namespace, removes every IAM binding and restriction scoped to
-- it (namespace scope or an exact resource in it) and releases its subnet reservation (C2), in
-- one statement: no grant and no address outlives its Namespace. Returns whether it
-- tombstoned, what policy it removed, and the released subnets. $1 namespace id.
WITH ns AS (
    UPDATE occ.namespaces_all
    SET deleted_at = clock_timestamp(), updated_at = clock_timestamp()
    WHERE id = $1 AND status = 'deleting' AND deleted_at IS NULL
    RETURNING id
), bindings AS (
    DELETE FROM occ.iam_bindings b
    WHERE b.namespace_id = $1 AND b.scope_kind IN ('namespace', 'resource')
      AND EXISTS (SELECT 1 FROM ns)
    RETURNING b.id, b.principal_id, b.role_id, b.scope_kind, b.resource_kind, b.resource_id
), subnets AS (
    DELETE FROM occ.docker_subnets s
    WHERE s.namespace_id = $1 AND EXISTS (SELECT 1 FROM ns)
    RETURNING s.subnet
), restrictions AS (
    DELETE FROM occ.iam_restrictions r
    WHERE r.namespace_id = $1 AND r.scope_kind IN ('namespace', 'resource')
      AND EXISTS (SELECT 1 FROM ns)
    RETURNING r.id, r.principal_id, r.actions, r.scope_kind, r.resource_kind, r.resource_id
)
SELECT EXISTS (SELECT 1 FROM ns) AS tombstoned,
       jsonb_build_object(
           'bindings', coalesce((SELECT jsonb_agg(jsonb_build_object(
               'id', id, 'principalId', principal_id, 'roleId', role_id, 'scopeKind', scope_kind,
               'resourceKind', resource_kind, 'resourceId', resource_id) ORDER BY id)
               FROM bindings), '[]'::jsonb),
           'restrictions', coalesce((SELECT jsonb_agg(jsonb_build_object(
               'id', id, 'principalId', principal_id, 'actions', actions, 'scopeKind', scope_kind,
               'resourceKind', resource_kind, 'resourceId', resource_id) ORDER BY id)
               FROM restrictions), '[]'::jsonb)) AS removed,
       coalesce((SELECT array_agg(subnet::text ORDER BY subnet) FROM subnets), '{}') AS released_subnets
