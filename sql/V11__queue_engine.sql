-- The queue engine at the PostgreSQL ceiling (issue 10; SPEC Q4, Q10, Q13). Forward-only;
-- never edit once landed. Numbered 11: V9, V10 and V12 are written on other branches.
--
-- 1. Lane heads. `occ.work_lanes` holds one row per lane: its head (the queued work with the
--    smallest (available_at, id), the one a claim takes next) and whether a live claim holds
--    the lane. A trigger on `occ.work` keeps the row current under the lane row's lock in the
--    same transaction as every insert, state or due-time change and delete, whoever writes
--    (admission functions, the worker, recovery, a cascade). A claim reads only lane heads, so
--    its cost does not depend on how many works wait behind a busy lane's head. The partial
--    unique index `work_one_claim_per_lane` (V1) stays: PostgreSQL still refuses two live
--    claims in one lane from any process, even if this table were wrong.
-- 2. Time as an index bound. Claimable now is the range `head_at <= statement_timestamp()` of
--    `work_lanes_ready` (a stable function, so an index bound; `clock_timestamp()` is volatile
--    and could only filter). Future-dated heads lie past the bound and are never read.
-- 3. Wake-ups (Q13). A notification goes out only when a work becomes claimable now by an
--    insert or a release (claimed -> queued with a due time already past), at most once per
--    transaction, and only by the one transaction holding the wake-up advisory lock at that
--    moment: a notifying commit holds PostgreSQL's global notify lock through its WAL flush,
--    so notifying from every admission serializes their commits. A transaction that finds the
--    lock taken leaves the wake-up to its holder, which commits at about the same time; the
--    worker claims again shortly after every wake-up, and the poll stays the fallback.
-- 4. A table that stays fast. Terminal works stay in `occ.work` (idempotency, Q1 and Q3;
--    `admin work list/show`, the operator reads and attempt/audit evidence read them there)
--    but are in none of the hot indexes, which are all partial on queued or claimed rows.
--    `work_leases` is dropped: a heartbeat changes only `lease_expires_at` and `updated_at`,
--    neither indexed, so with free space on the page (fillfactor 80) it is a HOT update that
--    writes no index entry. Recovery finds expired leases through `work_one_claim_per_lane`
--    (bounded by the live claims) and exhausted queued works through `work_queued_attempts`
--    (a range above the attempt limit, normally empty). Autovacuum runs on a fixed number of
--    dead rows (scale factor 0) and without cost delay, so a burst of completions is vacuumed
--    within a minute instead of after a fifth of a large table has died.

-- Q4 lane heads.
CREATE TABLE occ.work_lanes (
    lane      text PRIMARY KEY,
    -- The queued work a claim of this lane takes next, and its due time; NULL when none.
    head_id   bigint NULL,
    head_at   timestamptz NULL CHECK (head_at IS NULL OR isfinite(head_at)),
    -- A live claim holds the lane.
    claimed   boolean NOT NULL DEFAULT false,
    CHECK ((head_id IS NULL) = (head_at IS NULL))
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0.05);
CREATE INDEX work_lanes_ready ON occ.work_lanes (head_at, head_id)
    WHERE head_id IS NOT NULL AND NOT claimed;

-- The lane's queued works in claim order, and its live claim (through V1's unique index).
CREATE INDEX work_lane_queue ON occ.work (lane, available_at, id) WHERE state = 'queued';
CREATE INDEX work_queued_attempts ON occ.work (attempt_count) WHERE state = 'queued';
DROP INDEX occ.work_claimable;
DROP INDEX occ.work_leases;

-- Recomputes one lane's row from `occ.work` under the row's lock (the backfill below, and a
-- repair an operator can run). Lane rows are never deleted (one per Namespace or Agent that
-- ever had work), so the lock always has a row to take.
CREATE FUNCTION occ.work_lane_sync(p_lane text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    head record;
    busy boolean;
BEGIN
    PERFORM 1 FROM occ.work_lanes WHERE lane = p_lane FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO occ.work_lanes (lane) VALUES (p_lane) ON CONFLICT (lane) DO NOTHING;
        PERFORM 1 FROM occ.work_lanes WHERE lane = p_lane FOR UPDATE;
    END IF;
    SELECT id, available_at INTO head FROM occ.work
    WHERE lane = p_lane AND state = 'queued'
    ORDER BY available_at, id LIMIT 1;
    busy := EXISTS (SELECT 1 FROM occ.work WHERE lane = p_lane AND state = 'claimed');
    UPDATE occ.work_lanes
    SET head_id = head.id, head_at = head.available_at, claimed = busy
    WHERE lane = p_lane
      AND (head_id, head_at, claimed) IS DISTINCT FROM (head.id, head.available_at, busy);
END $$;

-- The trigger's incremental form of the same: under the lane row's lock (which every change
-- of the lane's works takes, so the row always matches the committed works), a claim sets
-- `claimed` and a claim's end clears it (one live claim per lane, V1's unique index); a work
-- that becomes queued replaces the head only if it comes first; only a change to the head
-- itself (claimed, deleted, re-dated) looks the next head up, one index probe of
-- work_lane_queue. An insert behind a busy head and a completion read no other work row.
CREATE FUNCTION occ.work_lane_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lane_id text := CASE WHEN TG_OP = 'DELETE' THEN OLD.lane ELSE NEW.lane END;
    cur occ.work_lanes;
    busy boolean;
    next_id bigint;
    next_at timestamptz;
    recompute boolean := false;
BEGIN
    SELECT * INTO cur FROM occ.work_lanes WHERE lane = lane_id FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO occ.work_lanes (lane) VALUES (lane_id) ON CONFLICT (lane) DO NOTHING;
        SELECT * INTO cur FROM occ.work_lanes WHERE lane = lane_id FOR UPDATE;
    END IF;
    busy := cur.claimed;
    next_id := cur.head_id;
    next_at := cur.head_at;
    IF TG_OP <> 'INSERT' THEN
        IF OLD.state = 'claimed' THEN
            busy := false;
        END IF;
        recompute := coalesce(OLD.id = cur.head_id, false);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.state = 'claimed' THEN
            busy := true;
        ELSIF NEW.state = 'queued' AND NOT recompute
              AND (next_id IS NULL OR (NEW.available_at, NEW.id) < (next_at, next_id)) THEN
            next_id := NEW.id;
            next_at := NEW.available_at;
        END IF;
    END IF;
    IF recompute THEN
        SELECT w.id, w.available_at INTO next_id, next_at FROM occ.work w
        WHERE w.lane = lane_id AND w.state = 'queued'
        ORDER BY w.available_at, w.id LIMIT 1;
    END IF;
    IF (cur.head_id, cur.head_at, cur.claimed) IS DISTINCT FROM (next_id, next_at, busy) THEN
        UPDATE occ.work_lanes SET head_id = next_id, head_at = next_at, claimed = busy
        WHERE lane = lane_id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER work_lane_insert AFTER INSERT ON occ.work
    FOR EACH ROW WHEN (NEW.state IN ('queued', 'claimed')) EXECUTE FUNCTION occ.work_lane_track();
-- A heartbeat changes neither column and fires nothing.
CREATE TRIGGER work_lane_update AFTER UPDATE OF state, available_at ON occ.work
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                       OR OLD.available_at IS DISTINCT FROM NEW.available_at)
    EXECUTE FUNCTION occ.work_lane_track();
CREATE TRIGGER work_lane_delete AFTER DELETE ON occ.work
    FOR EACH ROW WHEN (OLD.state IN ('queued', 'claimed')) EXECUTE FUNCTION occ.work_lane_track();

-- Lanes of the works already queued or claimed.
INSERT INTO occ.work_lanes (lane) SELECT DISTINCT lane FROM occ.work
WHERE state IN ('queued', 'claimed') ON CONFLICT DO NOTHING;
SELECT occ.work_lane_sync(lane) FROM occ.work_lanes;

-- Q13 wake-ups: see 3. above.
CREATE OR REPLACE FUNCTION occ.work_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.available_at <= clock_timestamp()
       AND current_setting('occ.work_notified', true) IS DISTINCT FROM 'on' THEN
        PERFORM set_config('occ.work_notified', 'on', true);
        IF pg_try_advisory_xact_lock(hashtext('occ.work_notify')) THEN
            PERFORM pg_notify('occ_work', '');
        END IF;
    END IF;
    RETURN NULL;
END $$;
-- The WHEN clauses keep claims and completions from calling the function at all.
DROP TRIGGER work_notify ON occ.work;
CREATE TRIGGER work_notify AFTER INSERT ON occ.work
    FOR EACH ROW WHEN (NEW.state = 'queued') EXECUTE FUNCTION occ.work_notify();
CREATE TRIGGER work_notify_release AFTER UPDATE OF state ON occ.work
    FOR EACH ROW WHEN (OLD.state = 'claimed' AND NEW.state = 'queued')
    EXECUTE FUNCTION occ.work_notify();

-- 5. Q3's key check without a regular expression built per row. PostgreSQL evaluates every
--    CHECK on every UPDATE (claim, heartbeat, completion), and V1's `work_key` compiled a
--    pattern from each row's ids ('^namespace:' || id || ...), which the server's small cache
--    of compiled expressions cannot keep: it was about two thirds of an update's cost. The same
--    rule, as a literal prefix (ids are `occ.is_ident`, with no pattern characters) and a
--    suffix matched against constant patterns, which stay compiled.
ALTER TABLE occ.work DROP CONSTRAINT work_key, ADD CONSTRAINT work_key CHECK (coalesce(
    (namespace_target = 'ready' AND idempotency_key = 'namespace:' || namespace_id || ':ensure')
    OR (namespace_target = 'deleted'
        AND starts_with(idempotency_key, 'namespace:' || namespace_id || ':delete')
        AND substr(idempotency_key, length('namespace:' || namespace_id || ':delete') + 1) ~ '^(:[1-9][0-9]*)?$')
    OR (agent_target = 'stopped'
        AND starts_with(idempotency_key, 'agent:' || agent_id || ':stop:')
        AND substr(idempotency_key, length('agent:' || agent_id || ':stop:') + 1) ~ '^[1-9][0-9]*$')
    OR (agent_target = 'deleted'
        AND starts_with(idempotency_key, 'agent:' || agent_id || ':delete')
        AND substr(idempotency_key, length('agent:' || agent_id || ':delete') + 1) ~ '^(:[1-9][0-9]*)?$')
    OR (revision_id IS NOT NULL
        AND starts_with(idempotency_key, 'agent_revision:' || revision_id || ':')
        AND substr(idempotency_key, length('agent_revision:' || revision_id || ':') + 1) ~ '^(reconcile|maintenance:[0-9]+)$'),
    false));

-- See 4. above. Fillfactor applies to pages written from now on.
ALTER TABLE occ.work SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 2000,
    autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
