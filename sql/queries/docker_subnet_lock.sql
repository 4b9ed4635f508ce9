-- Inside a reservation transaction, before docker_subnet_reserve.sql: serializes every
-- reservation of every worker process until commit, so the reserving statement's snapshot
-- already sees every earlier reservation and two passes never choose the same subnet. Held
-- for one short statement; the exclusion constraint stays the last word.
SELECT pg_advisory_xact_lock(7290419504362631251)
