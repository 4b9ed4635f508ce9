CREATE OR REPLACE VIEW occ.work_status AS
 SELECT w.id,
    w.idempotency_key,
    w.namespace_id,
    w.agent_id,
    w.revision_id,
    w.namespace_target,
    w.agent_target,
    w.actor_id,
        CASE
            WHEN (l.claim_id IS NOT NULL) THEN 'claimed'::text
            ELSE w.state
        END AS state,
    COALESCE(l.claim_attempt, w.attempt_count) AS attempt_count,
    w.available_at,
    l.claim_token,
    l.claimed_at,
    l.lease_expires_at,
    w.reason_code,
    w.result_data,
    w.created_at,
    GREATEST(w.updated_at, l.renewed_at) AS updated_at,
    w.completed_at,
    w.lane,
    w.operation,
    l.claim_worker,
    l.claim_host,
    l.claim_pid
   FROM (occ.work w
     LEFT JOIN occ.work_lanes l ON (((l.lane = w.lane) AND (l.claim_id = w.id))));
