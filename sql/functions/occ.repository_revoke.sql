-- SPEC G8: `admin repository revoke NS REF`: removes the Namespace's grant of the REF
-- (`administer` on the Namespace; audited `openclaw.repositories.revoke`); a REF not granted is
-- refused. Standing approvals of the REF stay: a revision of it is refused
-- `REPOSITORY_GRANT_REVOKED` on its next pass (G19's validate), and a new grant revives them.
CREATE OR REPLACE FUNCTION occ.repository_revoke(p_actor text, p_namespace text, p_ref text)
RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    ns text;
    revoked text;
BEGIN
    PERFORM occ.repository_input(p_ref, 'read');
    ns := occ.repository_namespace_lock(p_actor, p_namespace);
    DELETE FROM occ.repository_grants WHERE namespace_id = ns AND repository_ref = p_ref
    RETURNING scope INTO revoked;
    IF revoked IS NULL THEN
        RAISE EXCEPTION 'repository % is not granted to Namespace %', p_ref, ns
            USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.agent_audit(ns, p_actor, 'openclaw.repositories.revoke', 'namespace', ns,
        jsonb_build_object('repositoryRef', p_ref, 'scope', revoked));
    RETURN jsonb_build_object('namespaceId', ns, 'repositoryRef', p_ref, 'revokedScope', revoked);
END $$;
