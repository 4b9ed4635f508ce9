-- A Secret written without a driver belongs to the Installation's selection (and without one
-- is refused as NOT NULL).
CREATE OR REPLACE FUNCTION occ.secret_default_driver() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.driver_id IS NULL THEN
        SELECT secret_driver_id INTO NEW.driver_id FROM occ.installation;
    END IF;
    RETURN NEW;
END $$;
