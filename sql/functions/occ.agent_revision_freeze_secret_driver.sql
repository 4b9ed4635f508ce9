-- Admission freezes the Installation's selected Secret Driver into every new revision, whatever
-- function admitted it, unless the row names one itself.
CREATE OR REPLACE FUNCTION occ.agent_revision_freeze_secret_driver() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    selected text;
BEGIN
    SELECT secret_driver_id INTO selected FROM occ.installation;
    IF NEW.secret_driver_id IS NULL THEN
        NEW.secret_driver_id := selected;
    END IF;
    IF NEW.harness_auth->>'method' = 'secret' AND NEW.harness_auth->'secretDriverId' IS NULL
       AND selected IS NOT NULL THEN
        NEW.harness_auth := NEW.harness_auth || jsonb_build_object('secretDriverId', selected);
    END IF;
    RETURN NEW;
END $$;
