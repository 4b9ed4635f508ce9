CREATE OR REPLACE FUNCTION occ.namespace_show(p_namespace text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT occ.namespace_json(occ.resolve_namespace(p_namespace))
$$;
