-- SPEC §19 Data: a REF, `HOST/PATH`: a lower-case host (optional `:PORT`), then `/`-separated
-- segments of `A-Za-z0-9._-` (neither `.` nor `..`), at most 256 characters. The same rule as
-- the domain `occ.repository_ref` (sql/V30__repository_credentials.sql), for jsonb and
-- admission.
CREATE OR REPLACE FUNCTION occ.is_repository_ref(value text) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN value IS NOT NULL AND length(value) <= 256
        AND value ~ '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?(/(?!\.{1,2}(/|$))[A-Za-z0-9._-]+)+$';
