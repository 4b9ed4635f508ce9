-- `administer` on the source. Disabling stops new attachments and detaches nothing; the row stays.
CREATE OR REPLACE FUNCTION occ.credential_source_disable(p_namespace text, p_id text, p_actor text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    c occ.credential_sources;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    SELECT * INTO c FROM occ.credential_sources
    WHERE namespace_id = p_namespace AND id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'credential source %/% does not exist', p_namespace, p_id
            USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.agent_require(p_actor, 'administer', 'credential_source', p_id, p_namespace);
    IF c.state = 'disabled' THEN
        RAISE EXCEPTION 'credential source %/% is already disabled (by % at %)', p_namespace, p_id,
            c.disabled_by, to_char(c.disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE occ.credential_sources SET state = 'disabled', disabled_at = clock_timestamp(),
        disabled_by = p_actor
    WHERE namespace_id = p_namespace AND id = p_id
    RETURNING * INTO c;
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.credential_sources.disable',
        'credential_source', p_id, '{}');
    RETURN occ.credential_source_json(c);
END $$;
