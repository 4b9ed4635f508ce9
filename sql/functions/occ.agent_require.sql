-- Authorization is `occ.authorize` (the semantics of src/iam.rs); this wrapper names a
-- missing actor first, then refuses with the decision's reason.
CREATE OR REPLACE FUNCTION occ.agent_require(p_principal text, p_action text, p_kind text,
                                  p_resource text, p_namespace text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM occ.identities WHERE id = p_principal) THEN
        RAISE EXCEPTION 'actor % does not exist', p_principal USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM occ.require_authorized(p_principal, p_action, p_kind, p_resource, p_namespace,
        p_action || ' ' || p_kind);
END $$;
