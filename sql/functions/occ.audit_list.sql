-- The audit trail: the latest p_limit events, oldest first, optionally for one Namespace (id
-- or name, tombstones included) and since a time.
CREATE OR REPLACE FUNCTION occ.audit_list(p_namespace text DEFAULT NULL, p_since timestamptz DEFAULT NULL,
                               p_limit integer DEFAULT 1000)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(e ORDER BY (e ->> 'id')::bigint), '[]') FROM (
        SELECT jsonb_build_object(
            'id', a.id,
            'occurredAt', to_char(a.occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            'kind', a.kind, 'actorId', a.actor_id, 'action', a.action,
            'resourceKind', a.resource_kind, 'resourceId', a.resource_id,
            'namespaceId', a.namespace_id, 'outcome', a.outcome, 'reasonCode', a.reason_code,
            'workId', a.work_id, 'source', a.source, 'iamDriverId', a.iam_driver_id)
            || CASE WHEN a.kind = 'authorization_denial'
                    THEN jsonb_build_object('authorization', a.authorization_request,
                                            'decisionReason', a.decision_reason)
                    ELSE '{}'::jsonb END
            || jsonb_build_object('details', a.details) AS e
        FROM occ.audit_events a
        WHERE (p_namespace IS NULL OR a.namespace_id IN (
                  SELECT id FROM occ.namespaces_all WHERE id = p_namespace OR name = p_namespace))
          AND (p_since IS NULL OR a.occurred_at >= p_since)
        ORDER BY a.id DESC
        LIMIT p_limit) sub
$$;
