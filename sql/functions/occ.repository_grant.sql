-- SPEC G8, G19: `admin repository grant NS REF --scope read|write`: grants the REF to the
-- Namespace's Agents at the scope, or sets the scope of a granted REF (`administer` on the
-- Namespace; audited `openclaw.repositories.grant` with the previous scope).
CREATE OR REPLACE FUNCTION occ.repository_grant(p_actor text, p_namespace text, p_ref text,
        p_scope text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    ns text;
    previous text;
    g occ.repository_grants;
BEGIN
    PERFORM occ.repository_input(p_ref, p_scope);
    ns := occ.repository_namespace_lock(p_actor, p_namespace);
    SELECT scope INTO previous FROM occ.repository_grants
    WHERE namespace_id = ns AND repository_ref = p_ref FOR UPDATE;
    INSERT INTO occ.repository_grants AS r (namespace_id, repository_ref, scope, created_by)
    VALUES (ns, p_ref, p_scope, p_actor)
    ON CONFLICT (namespace_id, repository_ref) DO UPDATE
        SET scope = EXCLUDED.scope, created_by = EXCLUDED.created_by,
            created_at = clock_timestamp()
        WHERE r.scope IS DISTINCT FROM EXCLUDED.scope
    RETURNING * INTO g;
    IF g.namespace_id IS NULL THEN
        SELECT * INTO g FROM occ.repository_grants WHERE namespace_id = ns AND repository_ref = p_ref;
    END IF;
    PERFORM occ.agent_audit(ns, p_actor, 'openclaw.repositories.grant', 'namespace', ns,
        jsonb_strip_nulls(jsonb_build_object('repositoryRef', p_ref, 'scope', p_scope,
            'previousScope', previous)));
    RETURN jsonb_build_object('namespaceId', ns, 'repositoryRef', g.repository_ref,
        'scope', g.scope, 'previousScope', previous,
        'changed', previous IS DISTINCT FROM p_scope, 'createdBy', g.created_by,
        'createdAt', to_char(g.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
END $$;
