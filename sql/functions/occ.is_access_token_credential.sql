-- Exactly `{"kind": "access_token", "secretRef": {"name": NAME, "key": KEY}}`.
CREATE OR REPLACE FUNCTION occ.is_access_token_credential(c jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN coalesce(CASE WHEN jsonb_typeof(c) = 'object' AND jsonb_typeof(c->'secretRef') = 'object' THEN
        (c - 'kind'::text - 'secretRef'::text) = '{}'::jsonb
        AND c->'kind' = '"access_token"'::jsonb
        AND ((c->'secretRef') - 'name'::text - 'key'::text) = '{}'::jsonb
        AND jsonb_typeof(c->'secretRef'->'name') = 'string'
        AND jsonb_typeof(c->'secretRef'->'key') = 'string'
        AND occ.is_secret_name(c->'secretRef'->>'name')
        AND occ.is_secret_key(c->'secretRef'->>'key')
    ELSE false END, false);
