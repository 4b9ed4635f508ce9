-- One source a deployment names, checked and snapshotted (SPEC §13, 5399-5412): it exists,
-- the actor may `operate` it, it has the kind its flag asks for, it is `ready`, and the
-- selected Credential Gateway owns it (no Credential Proxy is built in). The row stays
-- share-locked to the end of the transaction, so a concurrent disable waits for the revision.
-- Messages name the source `ID in Namespace NS`, never `NS/ID`, which the CLI reads as an Agent.
CREATE OR REPLACE FUNCTION occ.credential_source_admit(p_namespace text, p_actor text, p_id text,
    p_kind text, p_gateway text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    c occ.credential_sources;
BEGIN
    SELECT * INTO c FROM occ.credential_sources
    WHERE namespace_id = p_namespace AND id = p_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'credential source % in Namespace % does not exist', p_id, p_namespace
            USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.agent_require(p_actor, 'operate', 'credential_source', p_id, p_namespace);
    IF c.kind <> p_kind THEN
        RAISE EXCEPTION 'credential source % in Namespace % is a % source, not a % source (%)', p_id,
            p_namespace, c.kind, p_kind,
            CASE p_kind WHEN 'model_key' THEN '--credential-source names the harness model key'
                        ELSE '--tool-source names a tool credential' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF c.state <> 'ready' THEN
        RAISE EXCEPTION 'credential source % in Namespace % is % (by % at %); it attaches to no new revision',
            p_id, p_namespace, c.state, c.disabled_by,
            to_char(c.disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF c.owner <> 'credential_gateway' THEN
        RAISE EXCEPTION 'credential source % in Namespace % is owned by Credential Proxy %, and no Credential Proxy is built in',
            p_id, p_namespace, c.driver_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF c.driver_id <> p_gateway THEN
        RAISE EXCEPTION 'credential source % in Namespace % belongs to Credential Gateway %, not the selected %',
            p_id, p_namespace, c.driver_id, p_gateway
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN jsonb_build_object('sourceId', c.id, 'credentialGatewayId', p_gateway,
        'kind', c.kind, 'driverId', c.driver_id, 'backendRef', c.backend_ref)
        || CASE WHEN c.egress IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('egress', c.egress) END;
END $$;
