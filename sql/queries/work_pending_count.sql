-- Queued and claimed work: the readiness probe's and the metrics' queue depth. Bounded
-- (issue 10): each count stops at $1 rows (index-only scans of the partial indexes), so a
-- large backlog never makes readiness slow; a count equal to $1 means "at least".
-- $1 cap.
SELECT (SELECT count(*) FROM (SELECT 1 FROM occ.work WHERE state = 'queued' LIMIT $1) q) AS queued,
       (SELECT count(*) FROM (SELECT 1 FROM occ.work WHERE state = 'claimed' LIMIT $1) c) AS claimed
