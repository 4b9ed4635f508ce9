-- A revision's withdrawal rows (SPEC E3, E10), each with its credential source as the worker
-- reads it (`credentials::SourceRow`), NULL when the source is gone. Read by the pass, and again
-- by its finalizing transaction under the Namespace and Agent locks.
-- $1 namespace id, $2 revision id.
SELECT w.source_id, w.state, w.requested_by, w.last_reason,
       CASE WHEN s.id IS NOT NULL THEN
           jsonb_build_object('id', s.id, 'kind', s.kind, 'owner', s.owner,
                              'driverId', s.driver_id, 'state', s.state,
                              'backendRef', s.backend_ref, 'egress', s.egress)
       END AS source
FROM occ.credential_withdrawals w
LEFT JOIN occ.credential_sources s ON s.namespace_id = w.namespace_id AND s.id = w.source_id
WHERE w.namespace_id = $1 AND w.revision_id = $2
ORDER BY w.source_id
