-- The snapshot of a deployment's sources (SPEC §13): the harness source first, then each tool
-- source in the given order, with distinct ids and distinct `OCC_CREDENTIAL_<ID>` names.
CREATE OR REPLACE FUNCTION occ.credential_sources_admit(p_namespace text, p_actor text,
    p_harness_source text, p_tool_sources text[], p_gateway text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    tools text[] := coalesce(p_tool_sources, '{}');
    snapshot jsonb := '[]'::jsonb;
    dup text;
    t text;
BEGIN
    IF p_harness_source IS NULL AND cardinality(tools) = 0 THEN
        RETURN snapshot;
    END IF;
    IF p_gateway IS NULL OR length(btrim(p_gateway)) = 0 THEN
        RAISE EXCEPTION 'credential sources need a selected Credential Gateway, and none is selected (credentialGateway in the OCC_INSTALLATION_CONFIG file)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT x INTO dup FROM unnest(tools || p_harness_source) x
    WHERE x IS NOT NULL GROUP BY x HAVING count(*) > 1 ORDER BY x LIMIT 1;
    IF dup IS NOT NULL THEN
        RAISE EXCEPTION 'credential source % is named more than once', dup
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT 'OCC_CREDENTIAL_' || upper(replace(x, '-', '_')) INTO dup FROM unnest(tools) x
    GROUP BY upper(replace(x, '-', '_')) HAVING count(*) > 1 ORDER BY 1 LIMIT 1;
    IF dup IS NOT NULL THEN
        RAISE EXCEPTION 'tool sources % share the environment name %',
            (SELECT string_agg(x, ' and ' ORDER BY x) FROM unnest(tools) x
             WHERE 'OCC_CREDENTIAL_' || upper(replace(x, '-', '_')) = dup), dup
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_harness_source IS NOT NULL THEN
        snapshot := snapshot || jsonb_build_array(occ.credential_source_admit(
            p_namespace, p_actor, p_harness_source, 'model_key', p_gateway));
    END IF;
    FOREACH t IN ARRAY tools LOOP
        snapshot := snapshot || jsonb_build_array(occ.credential_source_admit(
            p_namespace, p_actor, t, 'tool', p_gateway));
    END LOOP;
    RETURN snapshot;
END $$;
