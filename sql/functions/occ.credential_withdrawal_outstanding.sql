-- Whether a revision has withdrawal work queued or claimed (a claimed work stays `queued`),
-- other than the work p_except (the one a finalizing transaction is about to end).
CREATE OR REPLACE FUNCTION occ.credential_withdrawal_outstanding(p_agent text, p_revision text,
    p_except bigint DEFAULT NULL) RETURNS boolean
    LANGUAGE sql STABLE
    RETURN EXISTS (SELECT 1 FROM occ.work w
                   WHERE w.agent_id = p_agent AND w.revision_id = p_revision
                     AND w.agent_target = 'credential_withdrawal' AND w.state = 'queued'
                     AND w.id IS DISTINCT FROM p_except);
