-- Enqueues one withdrawal work of a revision (SPEC §12): key
-- `agent_revision:<rev>:credential_withdrawal:<p_suffix>`, a fresh UUID when p_suffix is NULL,
-- available p_delay_ms after now on the database clock. The key, or NULL when it exists.
CREATE OR REPLACE FUNCTION occ.credential_withdrawal_enqueue(p_namespace text, p_agent text,
    p_revision text, p_actor text, p_suffix text, p_delay_ms bigint) RETURNS text
    LANGUAGE sql
    AS $$
    INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, agent_target,
                          actor_id, available_at)
    VALUES ('agent_revision:' || p_revision || ':credential_withdrawal:'
                || coalesce(p_suffix, gen_random_uuid()::text),
            p_namespace, p_agent, p_revision, 'credential_withdrawal', p_actor,
            clock_timestamp() + p_delay_ms * interval '1 millisecond')
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING idempotency_key
$$;
