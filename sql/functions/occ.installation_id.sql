CREATE OR REPLACE FUNCTION occ.installation_id() RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    inst text;
BEGIN
    SELECT id INTO inst FROM occ.installation;
    IF inst IS NULL THEN
        RAISE EXCEPTION 'no Installation: run occ-worker bootstrap first'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN inst;
END $$;
