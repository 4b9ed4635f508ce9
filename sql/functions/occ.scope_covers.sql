-- Whether a binding or restriction scope covers the resource (kind, id, namespace).
CREATE OR REPLACE FUNCTION occ.scope_covers(
    s_kind text, s_namespace text, s_resource_kind text, s_resource_id text,
    r_kind text, r_id text, r_namespace text
) RETURNS boolean LANGUAGE sql IMMUTABLE
RETURN CASE s_kind
    WHEN 'installation' THEN true
    WHEN 'namespace' THEN r_namespace IS NOT NULL AND r_namespace = s_namespace
    WHEN 'resource' THEN r_namespace IS NOT DISTINCT FROM s_namespace
        AND s_resource_kind = r_kind AND s_resource_id = r_id
    ELSE false
END;
