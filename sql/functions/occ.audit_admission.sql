-- One admission audit event (kind mutation, outcome success), authorized by the built-in IAM
-- driver (`native-iam`).
CREATE OR REPLACE FUNCTION occ.audit_admission(
    p_actor text, p_action text, p_resource_kind text, p_resource_id text, p_namespace text,
    p_work_id bigint, p_details jsonb
) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO occ.audit_events (installation_id, namespace_id, kind, actor_id, action,
                                  resource_kind, resource_id, outcome, work_id, details,
                                  iam_driver_id)
    VALUES (occ.installation_id(), p_namespace, 'mutation', p_actor, p_action,
            p_resource_kind, p_resource_id, 'success', p_work_id, coalesce(p_details, '{}'),
            'native-iam')
    RETURNING id
$$;
