-- The type of a configured Installation backend (SPEC M2 step 2); no row when it is not
-- configured. $1 backend id.
SELECT type FROM occ.backends WHERE id = $1
