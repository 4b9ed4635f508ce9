-- SPEC E15: an operator's request to withdraw one source from the Agent's runtimes. Under
-- Namespace → Agent → row locks: the actor needs `operate` on the Agent; each runtime holder
-- (E14) whose snapshot admitted the source gets a `pending` row, or its pending row is taken
-- over (`requested_by`, `requested_at`); a `revoked` row stays revoked and gets no work. Each
-- revision with a pending row and no outstanding withdrawal work gets one, with a fresh key,
-- so a request starts a fresh chain. A deleting Agent, an unknown source or no holder that
-- admitted it is an admission error, and nothing is written.
CREATE OR REPLACE FUNCTION occ.credential_withdrawal_request(p_actor text, p_namespace text,
    p_agent text, p_source text) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    a occ.agents;
    revs text[];
    pending text[];
    works text[] := '{}';
    r text;
    k text;
BEGIN
    p_namespace := occ.resolve_namespace(p_namespace);
    PERFORM 1 FROM occ.namespaces_all WHERE id = p_namespace FOR SHARE;
    a := occ.agent_lock(p_namespace, p_agent);
    PERFORM occ.agent_require(p_actor, 'operate', 'agent', a.id, p_namespace);
    IF NOT EXISTS (SELECT 1 FROM occ.credential_sources
                   WHERE namespace_id = p_namespace AND id = p_source) THEN
        RAISE EXCEPTION 'credential source % in Namespace % does not exist', p_source, p_namespace
            USING ERRCODE = 'no_data_found';
    END IF;
    SELECT array_agg(rv.id ORDER BY rv.revision) INTO revs
    FROM occ.agent_revisions rv
    WHERE rv.id IN (SELECT occ.runtime_holders(a.id))
      AND rv.credential_sources @> jsonb_build_array(jsonb_build_object('sourceId', p_source));
    IF revs IS NULL THEN
        RAISE EXCEPTION 'no revision of agent %/% that may hold a runtime admitted credential source %',
            p_namespace, a.id, p_source
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    PERFORM 1 FROM occ.credential_withdrawals
    WHERE namespace_id = p_namespace AND source_id = p_source AND revision_id = ANY (revs)
    ORDER BY revision_id FOR UPDATE;
    INSERT INTO occ.credential_withdrawals (namespace_id, agent_id, revision_id, source_id,
                                            requested_by)
    SELECT p_namespace, a.id, x, p_source, p_actor FROM unnest(revs) x
    ON CONFLICT (namespace_id, revision_id, source_id) DO UPDATE
        SET requested_by = EXCLUDED.requested_by, requested_at = EXCLUDED.requested_at
        WHERE occ.credential_withdrawals.state = 'pending';
    SELECT array_agg(w.revision_id ORDER BY x.n) INTO pending
    FROM unnest(revs) WITH ORDINALITY x (id, n)
    JOIN occ.credential_withdrawals w
      ON w.namespace_id = p_namespace AND w.revision_id = x.id AND w.source_id = p_source
    WHERE w.state = 'pending';
    FOREACH r IN ARRAY coalesce(pending, '{}') LOOP
        IF NOT occ.credential_withdrawal_outstanding(a.id, r) THEN
            k := occ.credential_withdrawal_enqueue(p_namespace, a.id, r, p_actor, NULL, 0);
            works := works || k;
        END IF;
    END LOOP;
    PERFORM occ.agent_audit(p_namespace, p_actor, 'openclaw.agents.credentials_withdraw.admit',
        'agent', a.id,
        jsonb_build_object('sourceId', p_source, 'revisionIds', to_jsonb(revs),
                           'works', to_jsonb(works)));
    RETURN jsonb_build_object('agentId', a.id, 'sourceId', p_source,
        'revisions', to_jsonb(revs), 'works', to_jsonb(works));
END $$;
