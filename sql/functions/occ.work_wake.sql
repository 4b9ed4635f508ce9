-- Wake-ups, callable from a statement as well as from the insert trigger.
CREATE OR REPLACE FUNCTION occ.work_wake() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('occ.work_notified', true) IS DISTINCT FROM 'on' THEN
        PERFORM set_config('occ.work_notified', 'on', true);
        IF pg_try_advisory_xact_lock(hashtext('occ.work_notify')) THEN
            PERFORM pg_notify('occ_work', '');
        END IF;
    END IF;
    RETURN true;
END $$;
