-- Whether `p_principal` may `p_action` the resource. Restrictions deny; no identity, no access.
CREATE OR REPLACE FUNCTION occ.authorized(
    p_principal text, p_action text, p_kind text, p_id text, p_namespace text
) RETURNS boolean LANGUAGE sql STABLE
RETURN (occ.authorize(p_principal, p_action, p_kind, p_id, p_namespace) ->> 'allowed')::boolean;
