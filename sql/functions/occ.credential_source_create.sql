-- `create` on the source; the CLI passes the selected owner's id as p_driver_id.
CREATE OR REPLACE FUNCTION occ.credential_source_create(p_namespace text, p_id text, p_kind text,
    p_backend_ref text, p_owner text, p_driver_id text, p_egress jsonb, p_actor text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    c occ.credential_sources;
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    PERFORM occ.agent_require(p_actor, 'create', 'credential_source', p_id, p_namespace);
    INSERT INTO occ.credential_sources (namespace_id, id, kind, owner, driver_id, backend_ref,
                                        egress, created_by)
    VALUES (p_namespace, p_id, p_kind, coalesce(p_owner, 'credential_gateway'), p_driver_id,
            p_backend_ref, p_egress, p_actor)
    RETURNING * INTO c;
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.credential_sources.create',
        'credential_source', p_id,
        jsonb_build_object('kind', c.kind, 'owner', c.owner, 'driverId', c.driver_id,
                           'backendRef', c.backend_ref, 'egress', c.egress));
    RETURN occ.credential_source_json(c);
END $$;
