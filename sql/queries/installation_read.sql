-- The Installation a worker serves (at most one row; none before `bootstrap`) and the Secret
-- Driver it selected, read once at start-up.
SELECT id, secret_driver_id FROM occ.installation
