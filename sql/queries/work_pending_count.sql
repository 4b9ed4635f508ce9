-- Queued and claimed work: the readiness probe's and the metrics' queue depth. Bounded
-- (W5a): each count stops at $1 rows (index-only scans of partial indexes), so a large
-- backlog never makes readiness slow; a count equal to $1 means "at least". A claimed work is
-- `queued` in `occ.work` with its claim on its lane row (V14), so it is counted there and
-- taken out of the queued count.
-- $1 cap.
WITH claimed AS (
    SELECT count(*) AS n FROM (SELECT 1 FROM occ.work_lanes WHERE claim_id IS NOT NULL LIMIT $1) c
)
SELECT (SELECT count(*) FROM (SELECT 1 FROM occ.work WHERE state = 'queued'
                               LIMIT $1 + (SELECT n FROM claimed)) q) - (SELECT n FROM claimed)
           AS queued,
       (SELECT n FROM claimed) AS claimed
