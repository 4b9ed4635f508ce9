-- The schema's version (the newest migration applied) and whether it declares the oldest
-- release it keeps working (occ.schema_compatible_since, written by every `migrate` since the
-- schema window exists; a schema migrated before has no such function).
SELECT max(version), to_regprocedure('occ.schema_compatible_since()') IS NOT NULL
FROM refinery_schema_history
