-- SPEC G8, G15: `admin repository approve NS AGENT REF --scope read|write`: the Agent's
-- standing approval of the REF, which must be granted to the Namespace at the scope (`write`
-- covers `read`). A new approval gets a new id and generation 1; another scope raises the
-- generation and changes the fingerprint (the hex SHA-256 of `<REF>\n<scope>`); the same scope
-- changes nothing. `administer` on the Namespace; audited `openclaw.repositories.approve`.
CREATE OR REPLACE FUNCTION occ.repository_approve(p_actor text, p_namespace text, p_agent text,
        p_ref text, p_scope text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    ns text;
    a occ.agents;
    granted text;
    previous occ.repository_standing_approvals;
    approval occ.repository_standing_approvals;
    fingerprint text := encode(sha256(convert_to(p_ref || E'\n' || p_scope, 'UTF8')), 'hex');
BEGIN
    PERFORM occ.repository_input(p_ref, p_scope);
    ns := occ.repository_namespace_lock(p_actor, p_namespace);
    a := occ.agent_lock(ns, p_agent);
    SELECT scope INTO granted FROM occ.repository_grants
    WHERE namespace_id = ns AND repository_ref = p_ref FOR SHARE;
    IF granted IS NULL THEN
        RAISE EXCEPTION 'repository % is not granted to Namespace % (admin repository grant)',
            p_ref, ns USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF granted = 'read' AND p_scope = 'write' THEN
        RAISE EXCEPTION 'repository % is granted to Namespace % for read only, not write',
            p_ref, ns USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT * INTO previous FROM occ.repository_standing_approvals
    WHERE namespace_id = ns AND agent_id = a.id AND repository_ref = p_ref FOR UPDATE;
    IF previous.id IS NULL THEN
        INSERT INTO occ.repository_standing_approvals (namespace_id, agent_id, repository_ref,
            id, generation, scope, scope_fingerprint, approved_by)
        VALUES (ns, a.id, p_ref, gen_random_uuid(), 1, p_scope, fingerprint, p_actor)
        RETURNING * INTO approval;
    ELSIF previous.scope <> p_scope THEN
        UPDATE occ.repository_standing_approvals
        SET generation = generation + 1, scope = p_scope, scope_fingerprint = fingerprint,
            approved_by = p_actor, approved_at = clock_timestamp()
        WHERE namespace_id = ns AND agent_id = a.id AND repository_ref = p_ref
        RETURNING * INTO approval;
    ELSE
        approval := previous;
    END IF;
    PERFORM occ.agent_audit(ns, p_actor, 'openclaw.repositories.approve', 'agent', a.id,
        jsonb_strip_nulls(jsonb_build_object('repositoryRef', p_ref, 'scope', p_scope,
            'approvalId', approval.id, 'generation', approval.generation,
            'previousScope', previous.scope)));
    RETURN occ.repository_approval_json(approval)
        || jsonb_build_object('changed', previous.id IS NULL OR previous.scope <> p_scope);
END $$;
