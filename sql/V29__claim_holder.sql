-- A live claim names the worker process that holds it (SPEC Q4, W7): its id, host and pid, as
-- its `worker.started` line announces them, so `admin work list --state claimed` and
-- `admin work show` say who holds each claim and since when (`claimed_at`). Forward-only;
-- never edit once landed.
--
-- The claim statement sets them in the same UPDATE of the lane row (V14) that takes the claim:
-- no extra round trip and no extra row; every statement that ends a claim clears them.
-- They are not tied to `claim_id` by a constraint: a worker of an earlier release, during a
-- rolling upgrade, takes and ends claims without knowing these columns. `occ.work_status`
-- shows them only under a live claim.
ALTER TABLE occ.work_lanes
    ADD COLUMN claim_worker uuid NULL,
    ADD COLUMN claim_host text NULL,
    ADD COLUMN claim_pid integer NULL,
    -- All three or none; a host name as the kernel bounds it, a pid as the kernel counts.
    ADD CONSTRAINT work_lanes_claim_holder CHECK (
        (claim_worker IS NULL) = (claim_host IS NULL)
        AND (claim_worker IS NULL) = (claim_pid IS NULL)
        AND (claim_host IS NULL OR length(claim_host) BETWEEN 1 AND 255)
        AND (claim_pid IS NULL OR claim_pid > 0));
