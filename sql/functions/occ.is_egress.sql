-- SPEC S3: an egress allowlist, the shape of an Agent's sandbox policy and its ceiling.
CREATE OR REPLACE FUNCTION occ.is_egress(p_egress jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    -- Each set function reads only what its CASE proved to be an array or object, so a
    -- malformed value answers false instead of raising.
    RETURN jsonb_typeof(p_egress) = 'array'
        AND NOT EXISTS (
            SELECT 1
            FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_egress) = 'array'
                                           THEN p_egress ELSE '[]'::jsonb END) e
            WHERE jsonb_typeof(e) <> 'object'
               OR (SELECT array_agg(k ORDER BY k)
                   FROM jsonb_object_keys(CASE WHEN jsonb_typeof(e) = 'object'
                                               THEN e ELSE '{}'::jsonb END) k)
                  IS DISTINCT FROM ARRAY['cidr', 'ports']
               OR jsonb_typeof(e->'cidr') IS DISTINCT FROM 'string'
               OR jsonb_typeof(e->'ports') IS DISTINCT FROM 'array'
               OR CASE WHEN jsonb_typeof(e->'ports') = 'array'
                       THEN jsonb_array_length(e->'ports') = 0 ELSE true END
               OR EXISTS (SELECT 1
                          FROM jsonb_array_elements(CASE WHEN jsonb_typeof(e->'ports') = 'array'
                                                         THEN e->'ports' ELSE '[]'::jsonb END) p
                          WHERE CASE WHEN jsonb_typeof(p) = 'number' AND p::text ~ '^[1-9][0-9]{0,4}$'
                                     THEN p::text::integer > 65535 ELSE true END));
