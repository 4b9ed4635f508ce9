-- A Kubernetes Secret name (DNS subdomain) and data key, as the `secrets` backend reference
-- spells them.
CREATE OR REPLACE FUNCTION occ.is_secret_name(value text) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN value ~ '^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$';
