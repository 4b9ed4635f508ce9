-- The exact approved version of a Harness in a mode (R2, seed 004 `resolveApprovedHarness`),
-- no row when it is not approved. $1 harness id, $2 mode.
SELECT version FROM occ.approved_harnesses WHERE harness_id = $1 AND mode = $2
