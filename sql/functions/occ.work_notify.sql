CREATE OR REPLACE FUNCTION occ.work_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.available_at <= clock_timestamp() THEN
        PERFORM occ.work_wake();
    END IF;
    RETURN NULL;
END $$;
