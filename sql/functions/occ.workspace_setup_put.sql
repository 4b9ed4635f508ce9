-- SPEC WS1 admission: locks the Namespace row, then the Agent (refusing a deleting one), needs
-- `operate` on the Agent, replaces any record with a new incomplete id, audits, and enqueues
-- nothing: the next deployment or maintenance pass carries it.
CREATE OR REPLACE FUNCTION occ.workspace_setup_put(p_actor text, p_namespace text, p_agent text,
        p_document jsonb) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    ns text := occ.resolve_namespace(p_namespace);
    a occ.agents;
    previous text;
    new_id text := 'ws-' || lpad(to_hex(floor(random() * 4294967296)::bigint), 8, '0');
BEGIN
    PERFORM 1 FROM occ.namespaces_all WHERE id = ns FOR SHARE;
    a := occ.agent_lock(ns, p_agent);
    PERFORM occ.agent_require(p_actor, 'operate', 'agent', a.id, ns);
    IF jsonb_typeof(p_document) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'a workspace setup is one JSON object' USING ERRCODE = 'check_violation';
    END IF;
    IF octet_length(p_document::text) > 65536 THEN
        RAISE EXCEPTION 'a workspace setup is at most 65536 bytes' USING ERRCODE = 'check_violation';
    END IF;
    SELECT id INTO previous FROM occ.workspace_setups WHERE agent_id = a.id;
    INSERT INTO occ.workspace_setups AS s (agent_id, namespace_id, id, document, created_by)
    VALUES (a.id, ns, new_id, p_document, p_actor)
    ON CONFLICT (agent_id) DO UPDATE
        SET id = EXCLUDED.id, document = EXCLUDED.document, created_by = EXCLUDED.created_by,
            created_at = clock_timestamp(), completed_at = NULL, completed_revision_id = NULL;
    PERFORM occ.agent_audit(ns, p_actor, 'openclaw.agents.workspace_setup.admit', 'agent', a.id,
        jsonb_strip_nulls(jsonb_build_object('setupId', new_id, 'previousSetupId', previous)));
    RETURN jsonb_build_object('agentId', a.id, 'id', new_id, 'completed', false,
        'previousId', previous);
END $$;
