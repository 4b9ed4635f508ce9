-- `admin service-account show NS ID`.
CREATE OR REPLACE FUNCTION occ.service_account_show(p_namespace text, p_id text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v jsonb;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    v := occ.service_account_json(p_namespace, p_id);
    IF v IS NULL THEN
        RAISE EXCEPTION 'service account %/% does not exist', p_namespace, p_id
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN v;
END $$;
