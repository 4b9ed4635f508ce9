-- Configuration put: a new generation on every put.
CREATE OR REPLACE FUNCTION occ.configuration_put(p_namespace text, p_id text, p_document jsonb, p_actor text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    gen integer;
BEGIN
    p_namespace := occ.agent_ready_namespace(p_namespace);
    IF p_document IS NULL OR jsonb_typeof(p_document) <> 'object' THEN
        RAISE EXCEPTION 'configuration document must be a JSON object' USING ERRCODE = 'check_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM occ.configurations WHERE namespace_id = p_namespace AND id = p_id) THEN
        PERFORM occ.agent_require(p_actor, 'administer', 'configuration', p_id, p_namespace);
    ELSE
        PERFORM occ.agent_require(p_actor, 'create', 'configuration', p_id, p_namespace);
    END IF;
    INSERT INTO occ.configurations (namespace_id, id, generation, document, updated_by)
    VALUES (p_namespace, p_id, 1, p_document, p_actor)
    ON CONFLICT (namespace_id, id) DO UPDATE
        SET generation = occ.configurations.generation + 1, document = EXCLUDED.document,
            updated_by = EXCLUDED.updated_by, updated_at = clock_timestamp()
    RETURNING generation INTO gen;
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.configurations.put', 'configuration', p_id,
        jsonb_build_object('generation', gen));
    RETURN jsonb_build_object('namespaceId', p_namespace, 'id', p_id, 'generation', gen);
END $$;
