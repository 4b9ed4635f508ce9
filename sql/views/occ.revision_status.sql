CREATE OR REPLACE VIEW occ.revision_status AS
 SELECT r.id AS revision_id,
    r.namespace_id,
    r.agent_id,
    r.revision,
        CASE
            WHEN (w.id IS NULL) THEN 'unknown'::text
            WHEN (w.state = 'queued'::text) THEN 'pending'::text
            WHEN (w.state = 'claimed'::text) THEN 'deploying'::text
            WHEN (w.state = 'failed_permanent'::text) THEN 'failed'::text
            WHEN (w.reason_code = 'REVISION_SUPERSEDED'::text) THEN 'superseded'::text
            WHEN (w.reason_code = 'REVISION_STOPPED'::text) THEN 'stopped'::text
            WHEN (a.active_revision_id = r.id) THEN 'active'::text
            WHEN (r.retired_at IS NOT NULL) THEN 'superseded'::text
            ELSE 'stopped'::text
        END AS state,
    w.reason_code,
        CASE
            WHEN (w.state = 'failed_permanent'::text) THEN w.reason_code
            ELSE NULL::text
        END AS error,
    COALESCE((w.result_data -> 'warnings'::text), '[]'::jsonb) AS warnings,
    w.result_data,
    COALESCE(w.attempt_count, 0) AS attempts,
    r.created_at,
    w.updated_at,
    w.completed_at,
    r.retired_at
   FROM ((occ.agent_revisions r
     JOIN occ.agents a ON ((a.id = r.agent_id)))
     LEFT JOIN occ.work_status w ON ((w.idempotency_key = (('agent_revision:'::text || r.id) || ':reconcile'::text))));
