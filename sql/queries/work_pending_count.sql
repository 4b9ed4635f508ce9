-- Queued and claimed work: the readiness probe's and the metrics' queue depth. Bounded
-- (W5a): each count stops at $1 rows (index-only scans of partial indexes), so a large
-- backlog never makes readiness slow; a count equal to $1 means "at least". A claimed work is
-- `queued` in `occ.work` with its claim on its lane row (V14), so it is counted there and
-- taken out of the queued count. The oldest claimable work's wait is the first entry of the
-- ready lanes' index (`work_lanes_ready`): how long the oldest due head of a free lane has
-- been due, 0 when none is.
-- $1 cap.
WITH claimed AS (
    SELECT count(*) AS n FROM (SELECT 1 FROM occ.work_lanes WHERE claim_id IS NOT NULL LIMIT $1) c
)
SELECT (SELECT count(*) FROM (SELECT 1 FROM occ.work WHERE state = 'queued'
                               LIMIT $1 + (SELECT n FROM claimed)) q) - (SELECT n FROM claimed)
           AS queued,
       (SELECT n FROM claimed) AS claimed,
       coalesce((SELECT extract(epoch FROM clock_timestamp() - min(head_at))::float8
                 FROM occ.work_lanes
                 WHERE head_id IS NOT NULL AND claim_id IS NULL
                   AND head_at <= clock_timestamp()), 0) AS oldest_due_seconds
