-- SPEC G8, G15: `admin repository unapprove NS AGENT REF`: removes the Agent's standing
-- approval of the REF (`administer` on the Namespace; audited `openclaw.repositories.unapprove`);
-- none is refused. A standing revision of it hands off to `standing-withdrawal` cleanup on its
-- next maintenance pass (G15).
CREATE OR REPLACE FUNCTION occ.repository_unapprove(p_actor text, p_namespace text, p_agent text,
        p_ref text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    ns text;
    a occ.agents;
    removed occ.repository_standing_approvals;
BEGIN
    PERFORM occ.repository_input(p_ref, 'read');
    ns := occ.repository_namespace_lock(p_actor, p_namespace);
    a := occ.agent_lock(ns, p_agent);
    DELETE FROM occ.repository_standing_approvals
    WHERE namespace_id = ns AND agent_id = a.id AND repository_ref = p_ref
    RETURNING * INTO removed;
    IF removed.id IS NULL THEN
        RAISE EXCEPTION 'agent %/% has no standing approval of repository %', ns, a.id, p_ref
            USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM occ.agent_audit(ns, p_actor, 'openclaw.repositories.unapprove', 'agent', a.id,
        jsonb_build_object('repositoryRef', p_ref, 'approvalId', removed.id,
            'generation', removed.generation, 'scope', removed.scope));
    RETURN occ.repository_approval_json(removed) || jsonb_build_object('removed', true);
END $$;
