CREATE OR REPLACE FUNCTION occ.is_service_account_harness_auth(a jsonb, p_backend_id text) RETURNS boolean
LANGUAGE sql IMMUTABLE
    RETURN coalesce(CASE WHEN jsonb_typeof(a) = 'object' THEN
        (a - 'method'::text - 'source'::text - 'credential'::text - 'backendBinding'::text) = '{}'::jsonb
        AND a ? 'credential' AND a ? 'backendBinding'
        AND (a->'credential' = 'null'::jsonb OR occ.is_access_token_credential(a->'credential'))
        AND (a->'backendBinding' = 'null'::jsonb OR (occ.is_backend_binding(a->'backendBinding')
             AND p_backend_id IS NOT DISTINCT FROM a->'backendBinding'->>'backendId'))
    ELSE false END, false);
