-- A revision's snapshot sources (SPEC §13) in admission order, each with its source row as it
-- is now (`credentials::SourceRow`, NULL when gone) and its withdrawal row's state and requester
-- (NULL without one). Read by a revision pass, by a withdrawal pass, and again by the
-- withdrawal's finalizing transaction under the Namespace and Agent locks (E10).
-- $1 namespace id, $2 revision id.
SELECT e.value->>'sourceId' AS source_id,
       (SELECT jsonb_build_object('id', c.id, 'kind', c.kind, 'owner', c.owner,
                                  'driverId', c.driver_id, 'state', c.state,
                                  'backendRef', c.backend_ref, 'egress', c.egress)
          FROM occ.credential_sources c
         WHERE c.namespace_id = r.namespace_id AND c.id = e.value->>'sourceId') AS source,
       w.state AS withdrawal,
       w.requested_by
FROM occ.agent_revisions r
CROSS JOIN LATERAL jsonb_array_elements(r.credential_sources) WITH ORDINALITY AS e(value, n)
LEFT JOIN occ.credential_withdrawals w
       ON w.namespace_id = r.namespace_id AND w.revision_id = r.id
      AND w.source_id = e.value->>'sourceId'
WHERE r.namespace_id = $1 AND r.id = $2
ORDER BY e.n
