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
