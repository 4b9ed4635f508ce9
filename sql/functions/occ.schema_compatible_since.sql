-- The far end of the schema's expand/contract window (docs/operating.md, "Upgrading"): the
-- oldest release this schema keeps working, named by the newest migration that release embeds.
-- A binary that knows an older schema than this refuses to start on it ("upgrade the binary");
-- one that knows this or newer runs on it while a newer release has migrated ahead of it. Each
-- `occ-worker migrate` writes the value of the release that ran it (`migrate::OLDEST_SUPPORTED`,
-- which a conventions test holds this file to).
CREATE OR REPLACE FUNCTION occ.schema_compatible_since() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 29 $$;
