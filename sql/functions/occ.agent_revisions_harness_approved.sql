-- Every admission path pins an approved version: a revision whose Harness, mode and version are
-- not the catalog's at admission is refused (later catalog changes leave admitted rows alone).
CREATE OR REPLACE FUNCTION occ.agent_revisions_harness_approved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    approved text := occ.approved_harness_version(NEW.harness_id, NEW.harness_mode);
BEGIN
    IF approved IS NULL THEN
        RAISE EXCEPTION 'harness % is not approved in % mode', NEW.harness_id, NEW.harness_mode
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.harness_version IS DISTINCT FROM approved THEN
        RAISE EXCEPTION 'harness % % version % is not the approved version %',
            NEW.harness_id, NEW.harness_mode, NEW.harness_version, approved
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
