-- A backend binding's driver and workspace ids.
CREATE OR REPLACE FUNCTION occ.is_workspace_id(value text) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN value ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$';
