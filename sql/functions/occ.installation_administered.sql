-- Whether some identity still administers the installation, directly or through a group
-- with at least one member.
CREATE OR REPLACE FUNCTION occ.installation_administered() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM occ.iam_bindings b JOIN occ.iam_roles r ON r.id = b.role_id
        WHERE b.scope_kind = 'installation'
          AND 'administer' = ANY (r.actions) AND 'installation' = ANY (r.resource_kinds)
          AND (b.principal_id IS NOT NULL
               OR EXISTS (SELECT 1 FROM occ.iam_group_members m WHERE m.group_id = b.group_id)))
$$;
