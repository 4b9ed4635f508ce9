-- Reads for the operator: live Namespaces only (tombstones stay invisible).
CREATE OR REPLACE FUNCTION occ.namespace_list() RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(occ.namespace_json(id) ORDER BY name), '[]') FROM occ.namespaces
$$;
