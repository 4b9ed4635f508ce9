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
        lease_expires_at = NULL, claim_attempt = NULL, claim_worker = NULL,
        claim_host = NULL, claim_pid = NULL
    WHERE l.lane = p_lane AND l.claim_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM occ.work w
                      WHERE w.id = l.claim_id AND w.lane = p_lane AND w.state = 'queued');
END $$;
