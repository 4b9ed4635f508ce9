-- Lane maintenance once per statement instead of once per row (SPEC Q4, Q5).
--
-- Why. Measured on the drain at 16 threads (pg_stat_statements, track = all): V14's per-row
-- trigger ran three statements for every completed work (lock the lane, read the next head,
-- update the lane), each a full executor start that re-reads the lane table's checks; together
-- about a third of the batched completion's time. A finalizer batch completes its works in one
-- statement; its lanes are now kept by one trigger call for the statement, three statements
-- whatever the batch's size.
--
-- The rules (V14's, for a set of rows):
-- * Every lane a statement touched with a queued work (before or after) is locked FOR NO KEY
--   UPDATE, in lane order (two statements locking many lanes never wait on each other in a
--   cycle), after its row is created when a work is queued in a lane that has none.
-- * Then, in a statement of its own, so with a snapshot taken after the locks were granted:
--   each of those lanes' head is read again from `work_lane_queue` (one index probe per lane;
--   a transaction that changed the lane's works before it committed held the lane's lock, so
--   the snapshot sees all of them), and the lane's claim ends when its work left the queue or
--   was deleted. A lane row is written only when something changed.
-- * A requeue (deferral, retry, release, recovered lease) still clears its claim in its own
--   statement (V14).
-- Transition tables cannot be named by a trigger with a column list, so the update trigger
-- fires for every UPDATE of `occ.work` and returns at once when no work entered or left the
-- queue or was re-dated.
CREATE OR REPLACE FUNCTION occ.work_lanes_track() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    -- The lanes to keep, in lock order, and the works that left the queue (or were deleted).
    touched text[];
    ended bigint[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(DISTINCT n.lane ORDER BY n.lane) INTO touched
        FROM new_rows n WHERE n.state = 'queued';
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(DISTINCT o.lane ORDER BY o.lane), array_agg(o.id) INTO touched, ended
        FROM old_rows o WHERE o.state = 'queued';
    ELSE
        SELECT array_agg(DISTINCT c.lane ORDER BY c.lane),
               array_agg(DISTINCT o.id) FILTER (WHERE o.state = 'queued' AND n.state <> 'queued')
        INTO touched, ended
        FROM old_rows o
        JOIN new_rows n ON n.id = o.id
        CROSS JOIN LATERAL (VALUES (o.lane), (n.lane)) AS c(lane)
        WHERE (o.state = 'queued' OR n.state = 'queued')
          AND (o.state IS DISTINCT FROM n.state OR o.available_at IS DISTINCT FROM n.available_at
               OR o.lane IS DISTINCT FROM n.lane);
    END IF;
    IF touched IS NULL THEN
        RETURN NULL;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        INSERT INTO occ.work_lanes (lane)
        SELECT DISTINCT n.lane FROM new_rows n WHERE n.state = 'queued' ORDER BY n.lane
        ON CONFLICT (lane) DO NOTHING;
    END IF;
    PERFORM 1 FROM occ.work_lanes l WHERE l.lane = ANY (touched) ORDER BY l.lane
    FOR NO KEY UPDATE;
    -- A new statement, a new snapshot: every change to these lanes' works committed before
    -- the locks were granted is seen, and so is this transaction's own.
    UPDATE occ.work_lanes l
    SET head_id = h.id, head_at = h.available_at,
        -- The lane's claimed work left the queue or was deleted: the claim ends.
        claim_id = CASE WHEN l.claim_id = ANY (ended) THEN NULL ELSE l.claim_id END,
        claim_token = CASE WHEN l.claim_id = ANY (ended) THEN NULL ELSE l.claim_token END,
        claimed_at = CASE WHEN l.claim_id = ANY (ended) THEN NULL ELSE l.claimed_at END,
        renewed_at = CASE WHEN l.claim_id = ANY (ended) THEN NULL ELSE l.renewed_at END,
        lease_expires_at = CASE WHEN l.claim_id = ANY (ended) THEN NULL
                                ELSE l.lease_expires_at END,
        claim_attempt = CASE WHEN l.claim_id = ANY (ended) THEN NULL ELSE l.claim_attempt END,
        claim_worker = CASE WHEN l.claim_id = ANY (ended) THEN NULL ELSE l.claim_worker END,
        claim_host = CASE WHEN l.claim_id = ANY (ended) THEN NULL ELSE l.claim_host END,
        claim_pid = CASE WHEN l.claim_id = ANY (ended) THEN NULL ELSE l.claim_pid END
    FROM unnest(touched) AS t(lane)
    LEFT JOIN LATERAL (
        SELECT w.id, w.available_at FROM occ.work w
        WHERE w.lane = t.lane AND w.state = 'queued'
        ORDER BY w.available_at, w.id LIMIT 1
    ) h ON true
    WHERE l.lane = t.lane
      AND ((l.head_id, l.head_at) IS DISTINCT FROM (h.id, h.available_at)
           OR coalesce(l.claim_id = ANY (ended), false));
    RETURN NULL;
END $$;
