-- SPEC G8: a standing approval as `admin repository approve|list` show it.
CREATE OR REPLACE FUNCTION occ.repository_approval_json(a occ.repository_standing_approvals)
RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object('namespaceId', a.namespace_id, 'agentId', a.agent_id,
        'repositoryRef', a.repository_ref, 'id', a.id, 'generation', a.generation,
        'scope', a.scope, 'scopeFingerprint', a.scope_fingerprint, 'approvedBy', a.approved_by,
        'approvedAt', to_char(a.approved_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;
