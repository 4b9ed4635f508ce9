CREATE OR REPLACE FUNCTION occ.is_secret_key(value text) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN value ~ '^[-._a-zA-Z0-9]{1,253}$';
