-- Operator reads: how many seconds ago a worker last showed it was alive, by the database
-- clock: the newest renewal of a live claim or the newest attempt any work recorded. NULL
-- when no worker ever claimed anything.
SELECT extract(epoch FROM clock_timestamp() - greatest(
    (SELECT max(renewed_at) FROM occ.work_lanes WHERE claim_id IS NOT NULL),
    (SELECT at FROM occ.work_attempts ORDER BY id DESC LIMIT 1)))::float8
