-- Queued and claimed work: the readiness probe's and the metrics' queue depth.
SELECT count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'claimed') AS claimed
FROM occ.work WHERE state IN ('queued', 'claimed')
