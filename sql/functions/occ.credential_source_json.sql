-- A source as the operator reads it (camelCase keys; timestamps in UTC).
CREATE OR REPLACE FUNCTION occ.credential_source_json(c occ.credential_sources) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_build_object(
        'namespaceId', c.namespace_id, 'id', c.id, 'kind', c.kind, 'owner', c.owner,
        'driverId', c.driver_id, 'state', c.state, 'backendRef', c.backend_ref, 'egress', c.egress,
        'createdBy', c.created_by,
        'createdAt', to_char(c.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'disabledBy', c.disabled_by,
        'disabledAt', to_char(c.disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
