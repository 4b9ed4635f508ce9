-- SPEC E14's runtime holders: the Agent's revisions that may still hold a runtime — the
-- active one; the newest newer than it (any, when none is active) whose own `:reconcile` work
-- is not terminal; the newest newer than it whose deployment failed and which is not retired
-- (its runtime kept for diagnosis); the newest older than it not retired.
CREATE OR REPLACE FUNCTION occ.runtime_holders(p_agent text) RETURNS SETOF text
    LANGUAGE sql STABLE
    AS $$
    WITH a AS (
        SELECT ag.active_revision_id AS active_id,
               (SELECT r.revision FROM occ.agent_revisions r
                WHERE r.id = ag.active_revision_id) AS active_n
        FROM occ.agents ag WHERE ag.id = p_agent),
    revs AS (
        SELECT r.id, r.revision, r.retired_at, w.state AS work_state
        FROM occ.agent_revisions r
        LEFT JOIN occ.work w ON w.idempotency_key = 'agent_revision:' || r.id || ':reconcile'
        WHERE r.agent_id = p_agent)
    SELECT active_id FROM a WHERE active_id IS NOT NULL
    UNION
    (SELECT r.id FROM revs r, a
     WHERE r.revision > coalesce(a.active_n, 0) AND r.work_state = 'queued'
     ORDER BY r.revision DESC LIMIT 1)
    UNION
    (SELECT r.id FROM revs r, a
     WHERE r.revision > coalesce(a.active_n, 0) AND r.work_state = 'failed_permanent'
       AND r.retired_at IS NULL
     ORDER BY r.revision DESC LIMIT 1)
    UNION
    (SELECT r.id FROM revs r, a
     WHERE a.active_n IS NOT NULL AND r.revision < a.active_n AND r.retired_at IS NULL
     ORDER BY r.revision DESC LIMIT 1)
$$;
