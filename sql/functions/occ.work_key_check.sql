CREATE OR REPLACE FUNCTION occ.work_key_check() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
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
        OR (NEW.agent_target = 'sandbox_policy'
            AND starts_with(NEW.idempotency_key, 'agent:' || NEW.agent_id || ':sandbox_policy:')
            AND substr(NEW.idempotency_key,
                       length('agent:' || NEW.agent_id || ':sandbox_policy:') + 1)
                ~ '^[1-9][0-9]{0,8}$')
        OR (NEW.agent_target = 'credential_withdrawal'
            AND starts_with(NEW.idempotency_key,
                            'agent_revision:' || NEW.revision_id || ':credential_withdrawal:')
            AND substr(NEW.idempotency_key,
                       length('agent_revision:' || NEW.revision_id || ':credential_withdrawal:') + 1)
                ~ '^(activation|retirement|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(:recovery:([1-9]|1[0-5]))?$')
        OR (NEW.agent_target = 'repository_cleanup'
            AND NEW.idempotency_key = ANY (ARRAY[
                'agent_revision:' || NEW.revision_id || ':repository_cleanup:failed-preparation',
                'agent_revision:' || NEW.revision_id || ':repository_cleanup:terminal-runtime',
                'agent_revision:' || NEW.revision_id || ':repository_cleanup:standing-withdrawal']))
        OR (NEW.revision_id IS NOT NULL AND NEW.agent_target IS NULL
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
END $_$;
