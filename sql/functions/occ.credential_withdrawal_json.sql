-- A withdrawal row as the operator reads it (camelCase keys; timestamps in UTC).
CREATE OR REPLACE FUNCTION occ.credential_withdrawal_json(w occ.credential_withdrawals) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN jsonb_build_object(
        'namespaceId', w.namespace_id, 'agentId', w.agent_id, 'revisionId', w.revision_id,
        'sourceId', w.source_id, 'state', w.state, 'requestedBy', w.requested_by,
        'requestedAt', to_char(w.requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'lastReason', w.last_reason,
        'lastAt', to_char(w.last_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
        'revokedAt', to_char(w.revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
