-- Stale-claim recovery (Q10), one statement: expired claims return to the queue with
-- LEASE_EXPIRED evidence or fail at their final attempt, except a stored refused-candidate wait,
-- which returns with its refusal and its attempt refunded, and a repository cleanup, which
-- never fails by itself and returns with its attempt refunded (SPEC G4); queued rows whose attempts are
-- exhausted fail; a terminal Namespace-creation work moves its still-provisioning Namespace to
-- failed, with its audit evidence, in this same statement, and a terminal sandbox-policy work
-- fails its policy while its generation is still the stored one (SPEC S4). The Agent works
-- it failed are returned, for their reconcilers' after-recovery step (a credential withdrawal
-- queues its next recovery series, SPEC E13).
-- Bounded (Q10): expired claims are found among the live claims on the lane rows (V14's
-- partial index work_lanes_claims), exhausted queued works in the range of work_queued_attempts above
-- the limit; neither reads the queued backlog. A returned work keeps its due time, so it stays
-- ahead of the works queued behind it in its lane (lane order, Q4). A lane row a finalizing
-- transaction holds (FOR KEY SHARE) is passed by.
-- $1 max attempts.
WITH stale AS (
    -- A refused candidate waiting on its stop (R9) keeps that wait: its latest evidence is a
    -- stop wait (or an earlier recovery of one) carrying the refusal.
    SELECT w.id, l.lane, l.claim_attempt,
           w.agent_target IS NOT DISTINCT FROM 'repository_cleanup' AS refunded,
           (SELECT a.refusal FROM occ.work_attempts a
            WHERE a.work_id = w.id
              AND a.code IN ('REFUSED_CANDIDATE_STOP_PENDING', 'LEASE_EXPIRED')
              AND a.id = (SELECT max(b.id) FROM occ.work_attempts b WHERE b.work_id = w.id)
           ) AS refusal
    FROM occ.work_lanes l
    JOIN occ.work w ON w.id = l.claim_id
    WHERE l.claim_id IS NOT NULL
      AND (l.lease_expires_at <= clock_timestamp() OR NOT isfinite(l.lease_expires_at))
    FOR UPDATE OF l, w SKIP LOCKED
), released AS (
    UPDATE occ.work_lanes l
    SET claim_id = NULL, claim_token = NULL, claimed_at = NULL, renewed_at = NULL,
        lease_expires_at = NULL, claim_attempt = NULL, claim_worker = NULL,
        claim_host = NULL, claim_pid = NULL
    FROM stale s
    WHERE l.lane = s.lane AND l.claim_id = s.id
), expired AS (
    -- A stored wait refunds the attempt (the work keeps its count) and never fails here: the
    -- work must not end with its refused candidate running (seed 004 6285-6305, 6317-6329).
    -- A repository cleanup (SPEC G4) likewise: its obligation outlives crashes.
    UPDATE occ.work w
    SET state = CASE WHEN s.refusal IS NULL AND NOT s.refunded AND s.claim_attempt >= $1
                     THEN 'failed_permanent' ELSE 'queued' END,
        reason_code = CASE WHEN s.refusal IS NULL AND NOT s.refunded AND s.claim_attempt >= $1
                           THEN 'LEASE_EXPIRED' END,
        completed_at = CASE WHEN s.refusal IS NULL AND NOT s.refunded AND s.claim_attempt >= $1
                            THEN clock_timestamp() END,
        attempt_count = CASE WHEN s.refusal IS NULL AND NOT s.refunded THEN s.claim_attempt
                             ELSE w.attempt_count END,
        updated_at = clock_timestamp()
    FROM stale s
    WHERE w.id = s.id
    RETURNING w.id, w.namespace_id, w.namespace_target, w.actor_id, w.attempt_count, w.state,
              w.reason_code, s.refusal, s.refunded, w.agent_id, w.agent_target, w.idempotency_key, w.operation
), exhausted AS (
    UPDATE occ.work w
    SET state = 'failed_permanent', reason_code = 'ATTEMPTS_EXHAUSTED',
        completed_at = clock_timestamp(), updated_at = clock_timestamp()
    WHERE w.id IN (SELECT q.id FROM occ.work q
                   WHERE q.state = 'queued' AND q.attempt_count >= $1
                     AND q.agent_target IS DISTINCT FROM 'repository_cleanup'
                     AND NOT EXISTS (SELECT 1 FROM occ.work_lanes l
                                     WHERE l.lane = q.lane AND l.claim_id = q.id)
                   FOR UPDATE OF q SKIP LOCKED)
    RETURNING w.id, w.namespace_id, w.namespace_target, w.actor_id, w.attempt_count, w.state,
              w.reason_code, NULL::text AS refusal, false AS refunded, w.agent_id, w.agent_target, w.idempotency_key,
              w.operation
), changed AS (
    SELECT * FROM expired UNION ALL SELECT * FROM exhausted
), evidence AS (
    INSERT INTO occ.work_attempts (work_id, attempt, code, outcome, refusal)
    SELECT id, CASE WHEN refusal IS NULL AND NOT refunded THEN attempt_count
                    ELSE attempt_count + 1 END,
           coalesce(reason_code, 'LEASE_EXPIRED'),
           CASE state WHEN 'queued' THEN 'lease_expired' ELSE 'failed' END, refusal
    FROM changed
), failed_namespaces AS (
    UPDATE occ.namespaces_all n
    SET status = 'failed', updated_at = clock_timestamp()
    FROM changed c
    WHERE c.state = 'failed_permanent' AND c.namespace_target = 'ready'
      AND n.id = c.namespace_id AND n.status = 'provisioning' AND n.deleted_at IS NULL
    RETURNING n.id, c.id AS work_id, c.actor_id, c.reason_code
), failed_policies AS (
    UPDATE occ.agent_sandbox_policies p
    SET state = 'failed', reason_code = c.reason_code, updated_at = clock_timestamp()
    FROM changed c
    WHERE c.state = 'failed_permanent' AND c.agent_target = 'sandbox_policy'
      AND p.agent_id = c.agent_id
      AND p.generation::text = split_part(c.idempotency_key, ':', 4)
    RETURNING p.agent_id, p.namespace_id, p.generation, c.id AS work_id, c.actor_id, c.reason_code
), policy_audit AS (
    INSERT INTO occ.audit_events (installation_id, namespace_id, kind, actor_id, action,
                                  resource_kind, resource_id, outcome, reason_code, work_id, details,
                                  iam_driver_id)
    SELECT i.id, f.namespace_id, 'mutation', f.actor_id, 'openclaw.agents.lifecycle.sandbox_policy',
           'agent', f.agent_id, 'failure', f.reason_code, f.work_id,
           jsonb_build_object('generation', f.generation, 'policyState', 'failed', 'recovery', true),
           'native-iam'
    FROM failed_policies f CROSS JOIN occ.installation i
), audit AS (
    INSERT INTO occ.audit_events (installation_id, namespace_id, kind, actor_id, action,
                                  resource_kind, resource_id, outcome, reason_code, work_id, details,
                                  iam_driver_id)
    SELECT i.id, f.id, 'mutation', f.actor_id, 'openclaw.namespaces.lifecycle.ensure',
           'namespace', f.id, 'failure', f.reason_code, f.work_id,
           jsonb_build_object('namespaceStatus', 'failed', 'recovery', true), 'native-iam'
    FROM failed_namespaces f CROSS JOIN occ.installation i
)
-- A requeued work is claimable at once (it kept its past due time): wake idle workers (Q13).
SELECT (SELECT count(*) FROM changed WHERE state = 'queued' AND occ.work_wake()) AS requeued,
       (SELECT count(*) FROM changed WHERE state = 'failed_permanent') AS failed,
       (SELECT count(*) FROM failed_namespaces) AS failed_namespaces,
       (SELECT count(*) FROM failed_policies) AS failed_policies,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'key', idempotency_key,
                                                     'namespaceId', namespace_id,
                                                     'agentId', agent_id,
                                                     'operation', operation)
                                  ORDER BY id), '[]'::jsonb)
        FROM changed
        WHERE state = 'failed_permanent' AND agent_id IS NOT NULL)
           AS failed_agent_works
