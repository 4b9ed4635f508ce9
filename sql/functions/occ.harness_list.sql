-- `admin harness list`: the catalog.
CREATE OR REPLACE FUNCTION occ.harness_list() RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', harness_id, 'mode', mode,
               'version', version, 'approvedBy', approved_by, 'approvedAt', approved_at)
           ORDER BY harness_id, mode), '[]')
    FROM occ.approved_harnesses
$$;
