-- Like `agent_ready_namespace`, but holds the Namespace row FOR SHARE until commit: an Agent
-- admission and `namespace_delete` (which locks the row FOR UPDATE and refuses while Agents
-- exist) serialize, so no Agent is created in a Namespace whose deletion is being admitted.
CREATE OR REPLACE FUNCTION occ.agent_lock_ready_namespace(p_namespace text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    ns text := occ.resolve_namespace(p_namespace);
    s text;
BEGIN
    SELECT status INTO s FROM occ.namespaces_all WHERE id = ns AND deleted_at IS NULL FOR SHARE;
    IF s IS DISTINCT FROM 'ready' THEN
        RAISE EXCEPTION 'namespace % is % (must be ready)', p_namespace, coalesce(s, 'missing')
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN ns;
END $$;
