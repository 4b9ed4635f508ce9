-- The oldest release (by the newest migration it knows) the schema keeps working.
SELECT occ.schema_compatible_since()
