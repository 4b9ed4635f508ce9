-- The id of a live Namespace named by id or name; raises no_data_found otherwise.
CREATE OR REPLACE FUNCTION occ.resolve_namespace(p_ref text) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    found text;
BEGIN
    SELECT id INTO found FROM occ.namespaces WHERE id = p_ref;
    IF found IS NULL THEN
        SELECT id INTO found FROM occ.namespaces WHERE name = p_ref;
    END IF;
    IF found IS NULL THEN
        RAISE EXCEPTION 'no Namespace %', p_ref USING ERRCODE = 'no_data_found';
    END IF;
    RETURN found;
END $$;
