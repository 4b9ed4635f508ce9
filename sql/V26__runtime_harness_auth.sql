-- SPEC M5: the `runtime` harness auth `{"method": "runtime"}`, which names no Secret and no
-- source: the harness authenticates with what its runtime provides. The CHECK admits it beside
-- the three earlier methods; `occ.agent_deploy` gains `p_runtime_auth` (its file in
-- sql/functions/), so its earlier signature goes.
ALTER TABLE occ.agent_revisions DROP CONSTRAINT agent_revisions_harness_auth_check;
ALTER TABLE occ.agent_revisions ADD CONSTRAINT agent_revisions_harness_auth_check CHECK (
    harness_auth IS NULL OR coalesce(
        jsonb_typeof(harness_auth) = 'object' AND (
            (harness_auth ->> 'method' = ANY (ARRAY['secret', 'service_account'])
             AND jsonb_typeof(harness_auth -> 'source') = 'object'
             AND (harness_auth -> 'source') ->> 'namespaceId' IS NOT NULL
             AND (harness_auth -> 'source') ->> 'id' IS NOT NULL
             AND (harness_auth ->> 'method' = 'secret'
                  OR occ.is_service_account_harness_auth(harness_auth, backend_id)))
            OR (harness_auth ->> 'method' = 'credential_source'
                AND harness_auth - 'method' - 'sourceId' - 'credentialGatewayId' = '{}'::jsonb
                AND jsonb_typeof(harness_auth -> 'sourceId') = 'string'
                AND occ.is_ident(harness_auth ->> 'sourceId')
                AND jsonb_typeof(harness_auth -> 'credentialGatewayId') = 'string'
                AND length(btrim(harness_auth ->> 'credentialGatewayId')) > 0)
            OR harness_auth = '{"method": "runtime"}'::jsonb),
        false));
DROP FUNCTION occ.agent_deploy(text, text, text, text, text, text, text, text, text, jsonb,
    jsonb, text, text, text, jsonb, text, text[], text);
