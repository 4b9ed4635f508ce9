-- SPEC G8: a REF and a scope as an operator typed them, refused as bad input (SQLSTATE 22023,
-- the CLI's exit 2) when malformed, before anything is read or written.
CREATE OR REPLACE FUNCTION occ.repository_input(p_ref text, p_scope text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF NOT coalesce(occ.is_repository_ref(p_ref), false) THEN
        RAISE EXCEPTION 'repository % is not a REF: HOST/PATH, a lower-case host with an optional :PORT, then /-separated segments of A-Za-z0-9._- (not . or ..), at most 256 characters',
            coalesce(p_ref, 'null') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_scope IS DISTINCT FROM 'read' AND p_scope IS DISTINCT FROM 'write' THEN
        RAISE EXCEPTION 'scope % of repository % is not read or write', coalesce(p_scope, 'null'),
            p_ref USING ERRCODE = 'invalid_parameter_value';
    END IF;
END $$;
