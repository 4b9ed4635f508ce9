-- Q3's key rule is checked when a work's identity is written, not on every update (issue 10;
-- SPEC Q3). Forward-only; never edit once landed.
--
-- Why. PostgreSQL 15 evaluates every CHECK constraint of a table on every UPDATE of a row,
-- whichever columns the statement sets, and reads and prepares each stored constraint
-- expression once per statement. `work_key` (V11) is by far the largest of `occ.work`'s
-- (14 kB of stored expression text, about half of the table's) and the costliest per row
-- (concatenations and pattern matches), yet it reads only columns that are written once: the
-- key, the ids and the targets. Every completion, deferral, retry and release paid for it.
-- Measured on the no-op drain at 16 threads (README, Benchmarks), the stored expression was
-- read and prepared for every publication.
--
-- The same rule, the same error (SQLSTATE 23514, constraint `work_key`), now from a trigger
-- that fires before an INSERT and after an UPDATE naming one of the columns it reads; an
-- update that sets only the work's state never runs it. After, not before, the update: a
-- table with a BEFORE UPDATE row trigger has every updated row fetched and locked again for
-- it, whichever columns the trigger names. The expression is V11's, over NEW.

CREATE FUNCTION occ.work_key_check() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT coalesce(
        (NEW.namespace_target = 'ready'
         AND NEW.idempotency_key = 'namespace:' || NEW.namespace_id || ':ensure')
        OR (NEW.namespace_target = 'deleted'
            AND starts_with(NEW.idempotency_key, 'namespace:' || NEW.namespace_id || ':delete')
            AND substr(NEW.idempotency_key,
                       length('namespace:' || NEW.namespace_id || ':delete') + 1)
                ~ '^(:[1-9][0-9]*)?$')
        OR (NEW.agent_target = 'stopped'
            AND starts_with(NEW.idempotency_key, 'agent:' || NEW.agent_id || ':stop:')
            AND substr(NEW.idempotency_key, length('agent:' || NEW.agent_id || ':stop:') + 1)
                ~ '^[1-9][0-9]*$')
        OR (NEW.agent_target = 'deleted'
            AND starts_with(NEW.idempotency_key, 'agent:' || NEW.agent_id || ':delete')
            AND substr(NEW.idempotency_key, length('agent:' || NEW.agent_id || ':delete') + 1)
                ~ '^(:[1-9][0-9]*)?$')
        OR (NEW.revision_id IS NOT NULL
            AND starts_with(NEW.idempotency_key, 'agent_revision:' || NEW.revision_id || ':')
            AND substr(NEW.idempotency_key,
                       length('agent_revision:' || NEW.revision_id || ':') + 1)
                ~ '^(reconcile|maintenance:[0-9]+)$'),
        false)
    THEN
        -- As PostgreSQL words a CHECK violation, without the row's values.
        RAISE EXCEPTION 'new row for relation "work" violates check constraint "work_key"'
            USING ERRCODE = 'check_violation', SCHEMA = 'occ', TABLE = 'work',
                  CONSTRAINT = 'work_key';
    END IF;
    -- Ignored after an update.
    RETURN NEW;
END $$;

ALTER TABLE occ.work DROP CONSTRAINT work_key;
CREATE TRIGGER work_key_insert BEFORE INSERT ON occ.work
    FOR EACH ROW EXECUTE FUNCTION occ.work_key_check();
CREATE TRIGGER work_key_update
    AFTER UPDATE OF idempotency_key, namespace_id, agent_id, revision_id, namespace_target,
        agent_target
    ON occ.work FOR EACH ROW EXECUTE FUNCTION occ.work_key_check();
