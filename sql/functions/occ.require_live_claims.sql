-- A batched completion completes every work it names or none (SPEC Q1, Q6).
--
-- Why. A publication sends its completion, its claim and its COMMIT in one message (two round
-- trips where a statement each took five), so the worker cannot look at the completion's
-- answer before the commit. The completion itself refuses, with this error,
-- when a claim it names is no longer live (its lease ran out after the claims were locked):
-- the message's COMMIT is then never run, and the worker publishes the batch again unit by
-- unit, where that work alone is `ClaimLost`. The refusal has its own SQLSTATE, OC001
-- (claim_not_live), which the worker recognises by code alone.
CREATE OR REPLACE FUNCTION occ.require_live_claims(named integer, live bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF live IS DISTINCT FROM named THEN
        RAISE EXCEPTION 'a claim the batch names is no longer live (% of % live)', live, named
            USING ERRCODE = 'OC001';
    END IF;
    RETURN true;
END $$;
