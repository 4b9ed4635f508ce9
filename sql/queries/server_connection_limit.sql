-- The server's connection limit as it applies to the worker:
-- max_connections, the slots no ordinary role may take (superuser_reserved_connections, and
-- from PostgreSQL 16 reserved_connections), and the client connections open now, this one
-- excluded.
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int
           + coalesce(current_setting('reserved_connections', true)::int, 0) AS reserved,
       (SELECT count(*) FROM pg_stat_activity
         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())::int AS in_use
