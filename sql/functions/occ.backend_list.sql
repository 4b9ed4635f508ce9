-- `admin backend list`: the catalog.
CREATE OR REPLACE FUNCTION occ.backend_list() RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'type', type,
               'createdBy', created_by, 'createdAt', created_at) ORDER BY id), '[]')
    FROM occ.backends
$$;
