-- Identifiers are short, lowercase and safe to embed in idempotency keys and resource names.
CREATE OR REPLACE FUNCTION occ.is_ident(value text) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN value ~ '^[a-z0-9][a-z0-9_-]{0,62}$';
