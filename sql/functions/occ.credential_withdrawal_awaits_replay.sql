-- SPEC E15: a pending row *awaits replay* when its last reason asks an operator to act.
CREATE OR REPLACE FUNCTION occ.credential_withdrawal_awaits_replay(p_reason text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    RETURN coalesce(p_reason IN ('AUTHORIZATION_DENIED', 'ACTOR_REVOKED',
                                 'CREDENTIAL_WITHDRAWAL_MISCONFIGURED',
                                 'CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT',
                                 'CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT'), false);
