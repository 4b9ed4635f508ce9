-- The database clock in milliseconds since the epoch: due times (maintenance buckets) are
-- computed from it, never from the worker's clock.
SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
