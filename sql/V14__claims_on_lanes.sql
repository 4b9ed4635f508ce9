-- The claim lives on the lane row (issue 10; SPEC Q1, Q4, Q5, Q6, Q10). Forward-only; never
-- edit once landed.
--
-- Why. Measured on the drain at 16 threads, after batching: every claim was a non-HOT update
-- of the wide `occ.work` row (three full indexes, the partial ones, the checks and generated
-- columns), then the completion rewrote it again. A claim is now one update of the narrow
-- lane row (`occ.work_lanes`, which the claim had to update anyway); `occ.work` is written
-- once per pass, by the transition that ends it.
--
-- 1. A live claim is the lane row's claim columns: the claimed work (`claim_id`), its token,
--    when it was claimed and last renewed, its lease and the attempt it is (`claim_attempt`,
--    the work's `attempt_count` + 1; the work row takes it when a transition consumes the
--    attempt, and keeps its count when a deferral or a release refunds it). One set of claim
--    columns per lane, under the lane's primary key: PostgreSQL cannot hold two live claims
--    in one lane, whatever process writes (this replaces V1's `work_one_claim_per_lane`).
--    A claimed work stays `queued` in `occ.work`; `occ.work_status` is the operator's view
--    (`claimed` while its lane holds it, with the claim's attempt).
-- 2. Fencing. A verb joins the work to its lane and requires the claim (id, token, live
--    lease). A finalizing transaction locks the work row FOR UPDATE (as before: cascades and
--    other writers of the work wait) and the lane row FOR KEY SHARE: recovery, which takes the
--    lane FOR UPDATE with SKIP LOCKED, passes it by, while admission's trigger, which takes the
--    lane FOR NO KEY UPDATE, does not wait for it (a finalizer that holds its lane and then
--    locks a Namespace row must never wait on an admission that holds that Namespace and wants
--    the lane).
-- 3. The trigger ends a claim whenever its work leaves the queue or is deleted (a completion,
--    a failure, a cascade), so a lane never points at a work that is no longer queued. A
--    requeue (a deferral, a retry, a release, a recovered lease) clears the claim in its own
--    statement; a release and a recovery also wake workers (`occ.work_wake`).
-- 4. A heartbeat renews the lane row's lease: two unindexed columns, a HOT update of a narrow
--    row; `occ.work` is not written at all.

-- 1. The claim columns.
ALTER TABLE occ.work_lanes
    ADD COLUMN claim_id bigint NULL,
    ADD COLUMN claim_token uuid NULL,
    ADD COLUMN claimed_at timestamptz NULL,
    ADD COLUMN renewed_at timestamptz NULL,
    ADD COLUMN lease_expires_at timestamptz NULL,
    ADD COLUMN claim_attempt integer NULL,
    -- Each column on its own: an unclaimed lane has none of them.
    ADD CONSTRAINT work_lanes_claim CHECK (
        (claim_id IS NULL) = (claim_token IS NULL)
        AND (claim_id IS NULL) = (claimed_at IS NULL)
        AND (claim_id IS NULL) = (renewed_at IS NULL)
        AND (claim_id IS NULL) = (lease_expires_at IS NULL)
        AND (claim_id IS NULL) = (claim_attempt IS NULL)),
    -- V7's bounds, moved with the claim: finite times, a lease at most an hour past the claim
    -- or renewal that set it, and an attempt that counts.
    ADD CONSTRAINT work_lanes_claim_bounded CHECK (
        claim_id IS NULL
        OR (isfinite(claimed_at) AND isfinite(renewed_at) AND isfinite(lease_expires_at)
            AND lease_expires_at <= renewed_at + interval '1 hour' AND claim_attempt > 0));

-- The live claims move from the work rows to their lanes (the old trigger clears `claimed`).
CREATE TEMPORARY TABLE v14_claims ON COMMIT DROP AS
SELECT id, lane, claim_token, claimed_at, updated_at, lease_expires_at, attempt_count
FROM occ.work WHERE state = 'claimed';
DROP TRIGGER work_notify_release ON occ.work;
UPDATE occ.work w
SET state = 'queued', attempt_count = c.attempt_count - 1,
    claim_token = NULL, claimed_at = NULL, lease_expires_at = NULL
FROM v14_claims c WHERE w.id = c.id;

DROP INDEX occ.work_lanes_ready;
ALTER TABLE occ.work_lanes DROP COLUMN claimed;
CREATE INDEX work_lanes_ready ON occ.work_lanes (head_at, head_id)
    WHERE head_id IS NOT NULL AND claim_id IS NULL;
-- The live claims (recovery, the pending count): as many as the workers hold.
CREATE INDEX work_lanes_claims ON occ.work_lanes (lane) WHERE claim_id IS NOT NULL;

UPDATE occ.work_lanes l
SET claim_id = c.id, claim_token = c.claim_token, claimed_at = least(c.claimed_at, c.updated_at),
    renewed_at = c.updated_at, lease_expires_at = c.lease_expires_at,
    claim_attempt = c.attempt_count
FROM v14_claims c WHERE l.lane = c.lane;

-- The work rows lose their claim columns (and the checks over them, re-stated below).
DROP INDEX occ.work_one_claim_per_lane;
ALTER TABLE occ.work
    DROP CONSTRAINT work_claim,
    DROP CONSTRAINT work_claimed_attempt,
    DROP CONSTRAINT work_lease_bounded,
    DROP CONSTRAINT work_times_finite,
    DROP CONSTRAINT work_state_check,
    DROP COLUMN claim_token,
    DROP COLUMN claimed_at,
    DROP COLUMN lease_expires_at,
    ADD CONSTRAINT work_state_check CHECK (state IN ('queued', 'succeeded', 'failed_permanent')),
    ADD CONSTRAINT work_times_finite CHECK (
        isfinite(created_at) AND isfinite(updated_at) AND isfinite(available_at)
        AND (completed_at IS NULL OR isfinite(completed_at)));

-- 3. Wake-ups (V11 3.), callable from a statement as well as from the insert trigger.
CREATE FUNCTION occ.work_wake() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('occ.work_notified', true) IS DISTINCT FROM 'on' THEN
        PERFORM set_config('occ.work_notified', 'on', true);
        IF pg_try_advisory_xact_lock(hashtext('occ.work_notify')) THEN
            PERFORM pg_notify('occ_work', '');
        END IF;
    END IF;
    RETURN true;
END $$;
CREATE OR REPLACE FUNCTION occ.work_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.available_at <= clock_timestamp() THEN
        PERFORM occ.work_wake();
    END IF;
    RETURN NULL;
END $$;

-- 3. Lane heads and the end of claims. As V11's, under the lane row's lock, which it now
-- takes FOR NO KEY UPDATE (see 2. above).
CREATE OR REPLACE FUNCTION occ.work_lane_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lane_id text := CASE WHEN TG_OP = 'DELETE' THEN OLD.lane ELSE NEW.lane END;
    cur occ.work_lanes;
    next_id bigint;
    next_at timestamptz;
    recompute boolean := false;
    ends_claim boolean := false;
BEGIN
    SELECT * INTO cur FROM occ.work_lanes WHERE lane = lane_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        INSERT INTO occ.work_lanes (lane) VALUES (lane_id) ON CONFLICT (lane) DO NOTHING;
        SELECT * INTO cur FROM occ.work_lanes WHERE lane = lane_id FOR NO KEY UPDATE;
    END IF;
    next_id := cur.head_id;
    next_at := cur.head_at;
    IF TG_OP <> 'INSERT' THEN
        recompute := coalesce(OLD.id = cur.head_id, false);
        ends_claim := coalesce(OLD.id = cur.claim_id, false)
                      AND (TG_OP = 'DELETE' OR NEW.state <> 'queued');
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state = 'queued' AND NOT recompute
       AND (next_id IS NULL OR (NEW.available_at, NEW.id) < (next_at, next_id)) THEN
        next_id := NEW.id;
        next_at := NEW.available_at;
    END IF;
    IF recompute THEN
        SELECT w.id, w.available_at INTO next_id, next_at FROM occ.work w
        WHERE w.lane = lane_id AND w.state = 'queued'
        ORDER BY w.available_at, w.id LIMIT 1;
    END IF;
    IF ends_claim THEN
        UPDATE occ.work_lanes
        SET head_id = next_id, head_at = next_at, claim_id = NULL, claim_token = NULL,
            claimed_at = NULL, renewed_at = NULL, lease_expires_at = NULL, claim_attempt = NULL
        WHERE lane = lane_id;
    ELSIF (cur.head_id, cur.head_at) IS DISTINCT FROM (next_id, next_at) THEN
        UPDATE occ.work_lanes SET head_id = next_id, head_at = next_at WHERE lane = lane_id;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER work_lane_insert ON occ.work;
CREATE TRIGGER work_lane_insert AFTER INSERT ON occ.work
    FOR EACH ROW WHEN (NEW.state = 'queued') EXECUTE FUNCTION occ.work_lane_track();
DROP TRIGGER work_lane_delete ON occ.work;
CREATE TRIGGER work_lane_delete AFTER DELETE ON occ.work
    FOR EACH ROW WHEN (OLD.state = 'queued') EXECUTE FUNCTION occ.work_lane_track();

-- The repair function recomputes the head; a claim survives only while its work is still a
-- queued work of the lane.
CREATE OR REPLACE FUNCTION occ.work_lane_sync(p_lane text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    head record;
BEGIN
    PERFORM 1 FROM occ.work_lanes WHERE lane = p_lane FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO occ.work_lanes (lane) VALUES (p_lane) ON CONFLICT (lane) DO NOTHING;
        PERFORM 1 FROM occ.work_lanes WHERE lane = p_lane FOR UPDATE;
    END IF;
    SELECT id, available_at INTO head FROM occ.work
    WHERE lane = p_lane AND state = 'queued'
    ORDER BY available_at, id LIMIT 1;
    UPDATE occ.work_lanes l
    SET head_id = head.id, head_at = head.available_at
    WHERE l.lane = p_lane AND (l.head_id, l.head_at) IS DISTINCT FROM (head.id, head.available_at);
    UPDATE occ.work_lanes l
    SET claim_id = NULL, claim_token = NULL, claimed_at = NULL, renewed_at = NULL,
        lease_expires_at = NULL, claim_attempt = NULL
    WHERE l.lane = p_lane AND l.claim_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM occ.work w
                      WHERE w.id = l.claim_id AND w.lane = p_lane AND w.state = 'queued');
END $$;

-- 1. The work rows as operators see them: a work is `claimed` while its lane holds it, with
-- the attempt its claim is.
CREATE VIEW occ.work_status AS
SELECT w.id, w.idempotency_key, w.namespace_id, w.agent_id, w.revision_id, w.namespace_target,
       w.agent_target, w.actor_id,
       CASE WHEN l.claim_id IS NOT NULL THEN 'claimed' ELSE w.state END AS state,
       coalesce(l.claim_attempt, w.attempt_count) AS attempt_count,
       w.available_at, l.claim_token, l.claimed_at, l.lease_expires_at,
       w.reason_code, w.result_data, w.created_at,
       greatest(w.updated_at, l.renewed_at) AS updated_at, w.completed_at, w.lane, w.operation
FROM occ.work w
LEFT JOIN occ.work_lanes l ON l.lane = w.lane AND l.claim_id = w.id;

-- R12 reads the claim through the same view (columns unchanged).
CREATE OR REPLACE VIEW occ.revision_status AS
SELECT r.id AS revision_id, r.namespace_id, r.agent_id, r.revision,
    CASE
        WHEN w.id IS NULL THEN 'unknown'
        WHEN w.state = 'queued' THEN 'pending'
        WHEN w.state = 'claimed' THEN 'deploying'
        WHEN w.state = 'failed_permanent' THEN 'failed'
        WHEN w.reason_code = 'REVISION_SUPERSEDED' THEN 'superseded'
        WHEN w.reason_code = 'REVISION_STOPPED' THEN 'stopped'
        WHEN a.active_revision_id = r.id THEN 'active'
        WHEN r.retired_at IS NOT NULL THEN 'superseded'
        ELSE 'stopped'
    END AS state,
    w.reason_code,
    CASE WHEN w.state = 'failed_permanent' THEN w.reason_code END AS error,
    coalesce(w.result_data->'warnings', '[]'::jsonb) AS warnings,
    w.result_data,
    coalesce(w.attempt_count, 0) AS attempts,
    r.created_at, w.updated_at, w.completed_at, r.retired_at
FROM occ.agent_revisions r
JOIN occ.agents a ON a.id = r.agent_id
LEFT JOIN occ.work_status w ON w.idempotency_key = 'agent_revision:' || r.id || ':reconcile';

-- N7's Namespace read shows a claimed work as claimed (through the same view).
CREATE OR REPLACE FUNCTION occ.namespace_json(p_id text) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', n.id, 'name', n.name, 'status', n.status,
        'existingNamespace', n.existing_namespace, 'createdBy', n.created_by,
        'createdAt', to_char(n.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'updatedAt', to_char(n.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'agents', (SELECT count(*) FROM occ.agents a WHERE a.namespace_id = n.id),
        'work', coalesce((SELECT jsonb_agg(jsonb_build_object(
                    'key', w.idempotency_key, 'state', w.state, 'attempts', w.attempt_count,
                    'reasonCode', w.reason_code) ORDER BY w.id)
                FROM occ.work_status w WHERE w.namespace_id = n.id AND w.agent_id IS NULL), '[]'))
    FROM occ.namespaces n WHERE n.id = p_id
$$;

