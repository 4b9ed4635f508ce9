-- Whether each entry's network lies within a ceiling entry's whose ports include all of its
-- ports (SPEC S3). Both must be `occ.is_egress` with valid networks.
CREATE OR REPLACE FUNCTION occ.egress_within(p_egress jsonb, p_ceiling jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    RETURN NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(p_egress) e
        WHERE NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements(coalesce(p_ceiling, '[]'::jsonb)) c
            WHERE (e->>'cidr')::cidr <<= (c->>'cidr')::cidr
              AND (c->'ports') @> (e->'ports')));
