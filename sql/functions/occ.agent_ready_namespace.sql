-- The id of a live Namespace named by id or name (`occ.resolve_namespace`), which must be
-- `ready` for any Agent, Configuration or Secret admission.
CREATE OR REPLACE FUNCTION occ.agent_ready_namespace(p_namespace text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    ns text := occ.resolve_namespace(p_namespace);
    s text;
BEGIN
    SELECT status INTO s FROM occ.namespaces WHERE id = ns;
    IF s <> 'ready' THEN
        RAISE EXCEPTION 'namespace % is % (must be ready)', p_namespace, s
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN ns;
END $$;
