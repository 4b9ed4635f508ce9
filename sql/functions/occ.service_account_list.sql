-- `admin service-account list NS`.
CREATE OR REPLACE FUNCTION occ.service_account_list(p_namespace text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    RETURN (SELECT coalesce(jsonb_agg(occ.service_account_json(namespace_id, id) ORDER BY id), '[]')
            FROM occ.service_accounts WHERE namespace_id = p_namespace);
END $$;
