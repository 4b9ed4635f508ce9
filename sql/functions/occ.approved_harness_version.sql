-- The exact approved version of a Harness in a mode, NULL when it is not approved.
CREATE OR REPLACE FUNCTION occ.approved_harness_version(p_harness text, p_mode text) RETURNS text
LANGUAGE sql STABLE
    RETURN (SELECT version FROM occ.approved_harnesses WHERE harness_id = p_harness AND mode = p_mode);
