-- Operator reads: the state of what a work row changes, in the words of its kind: a revision's
-- deployment status (pending, deploying, …), `stopping` or `deleting` for an Agent's stop or
-- deletion, its sandbox policy's state (pending, applied, failed; `superseded` once a newer
-- generation is stored) for a sandbox-policy work, `withdrawing` for a credential withdrawal
-- (it names a revision but never deploys it), its Namespace's status (provisioning,
-- deleting, …) otherwise. No row when no work
-- has the key. $1 work key.
SELECT CASE
    WHEN w.agent_target = 'credential_withdrawal' THEN 'withdrawing'
    WHEN w.revision_id IS NOT NULL THEN
        (SELECT s.state FROM occ.revision_status s WHERE s.revision_id = w.revision_id)
    WHEN w.agent_target = 'stopped' THEN 'stopping'
    WHEN w.agent_target = 'deleted' THEN 'deleting'
    WHEN w.agent_target = 'sandbox_policy' THEN
        (SELECT CASE WHEN p.generation::text = split_part(w.idempotency_key, ':', 4)
                     THEN p.state ELSE 'superseded' END
         FROM occ.agent_sandbox_policies p WHERE p.agent_id = w.agent_id)
    ELSE (SELECT n.status FROM occ.namespaces_all n WHERE n.id = w.namespace_id)
END
FROM occ.work w
WHERE w.idempotency_key = $1
