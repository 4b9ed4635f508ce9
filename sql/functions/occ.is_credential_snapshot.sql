-- A revision's snapshot of the sources its runtime was admitted with (SPEC §13, 5399-5412):
-- `[{sourceId, credentialGatewayId | credentialProxyId, kind, driverId, backendRef, egress?}]`,
-- each source once, the harness source included.
CREATE OR REPLACE FUNCTION occ.is_credential_snapshot(s jsonb, harness_auth jsonb) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    e jsonb;
    ids text[] := '{}';
BEGIN
    IF jsonb_typeof(s) IS DISTINCT FROM 'array' THEN
        RETURN false;
    END IF;
    FOR e IN SELECT value FROM jsonb_array_elements(s) LOOP
        IF NOT coalesce(
            jsonb_typeof(e) = 'object'
            AND e - 'sourceId' - 'credentialGatewayId' - 'credentialProxyId' - 'kind' - 'driverId'
                  - 'backendRef' - 'egress' = '{}'::jsonb
            AND jsonb_typeof(e -> 'sourceId') = 'string' AND occ.is_ident(e ->> 'sourceId')
            AND ((e ? 'credentialGatewayId') <> (e ? 'credentialProxyId'))
            AND jsonb_typeof(coalesce(e -> 'credentialGatewayId', e -> 'credentialProxyId')) = 'string'
            AND length(btrim(coalesce(e ->> 'credentialGatewayId', e ->> 'credentialProxyId'))) > 0
            AND e ->> 'kind' IN ('model_key', 'tool')
            AND jsonb_typeof(e -> 'driverId') = 'string'
            AND length(btrim(e ->> 'driverId')) > 0
            AND jsonb_typeof(e -> 'backendRef') = 'string'
            AND (e ->> 'backendRef') ~ '^[a-z0-9][-a-z0-9]*/[a-z0-9][-a-z0-9.]*/[-._a-zA-Z0-9]+$'
            AND (NOT e ? 'egress' OR jsonb_typeof(e -> 'egress') IN ('object', 'null')),
            false)
           OR (e ->> 'sourceId') = ANY (ids) THEN
            RETURN false;
        END IF;
        ids := ids || (e ->> 'sourceId');
    END LOOP;
    IF harness_auth ->> 'method' = 'credential_source' THEN
        RETURN EXISTS (SELECT 1 FROM jsonb_array_elements(s) x
                       WHERE x.value ->> 'sourceId' = harness_auth ->> 'sourceId'
                         AND x.value ->> 'kind' = 'model_key'
                         AND x.value ->> 'credentialGatewayId' = harness_auth ->> 'credentialGatewayId');
    END IF;
    RETURN true;
END $$;
