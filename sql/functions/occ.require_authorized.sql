-- Operator-facing wording of IAM refusals (SPEC section 9): the refusal names the
-- scope the actor lacks in the operator's terms: creating a Namespace (kind namespace, no
-- Namespace yet) and administering the installation are refused "on installation ID", a
-- Namespace by its name, a resource as KIND ID in Namespace NAME (`ACTOR may not WHAT: REASON`).
CREATE OR REPLACE FUNCTION occ.require_authorized(
    p_principal text, p_action text, p_kind text, p_id text, p_namespace text, p_what text
) RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    decision jsonb := occ.authorize(p_principal, p_action, p_kind, p_id, p_namespace);
    ns_name text;
    scope text;
BEGIN
    IF (decision ->> 'allowed')::boolean THEN
        RETURN;
    END IF;
    SELECT name INTO ns_name FROM occ.namespaces_all WHERE id = p_namespace;
    scope := CASE
        WHEN p_kind = 'installation' OR p_namespace IS NULL THEN 'installation ' || p_id
        WHEN p_kind = 'namespace' THEN 'Namespace ' || coalesce(ns_name, p_namespace)
        ELSE p_kind || ' ' || p_id || ' in Namespace ' || coalesce(ns_name, p_namespace) END;
    RAISE EXCEPTION '% may not %: % (needs % % on %)', p_principal, p_what, decision ->> 'reason',
        p_action, p_kind, scope
        USING ERRCODE = 'insufficient_privilege';
END $$;
