-- Operator reads: the audit trail newest first. $1 Namespace id (live or deleted; NULL: all),
-- $2 at or after this RFC 3339 time (NULL: any), $3 ids below this one (the cursor of the
-- page before; NULL: from the newest), $4 limit, $5 within this interval of the database
-- clock (NULL: any).
SELECT coalesce(jsonb_agg(jsonb_build_object(
        'id', a.id,
        'occurredAt', to_char(a.occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'kind', a.kind, 'actorId', a.actor_id, 'action', a.action,
        'resourceKind', a.resource_kind, 'resourceId', a.resource_id,
        'namespaceId', a.namespace_id, 'outcome', a.outcome, 'reasonCode', a.reason_code,
        'workId', a.work_id, 'details', a.details)
    ORDER BY a.id DESC), '[]')
FROM (SELECT * FROM occ.audit_events
      WHERE ($1::text IS NULL OR namespace_id = $1)
        AND ($2::text IS NULL OR occurred_at >= $2::text::timestamptz)
        AND ($3::bigint IS NULL OR id < $3)
        AND ($5::text IS NULL OR occurred_at >= clock_timestamp() - $5::text::interval)
      ORDER BY id DESC
      LIMIT $4) a
