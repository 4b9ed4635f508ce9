-- SPEC E14's maintenance re-queue, inside the fenced transaction that locked the Namespace:
-- the first pending row (of a source that exists, preferring one not awaiting replay) of the
-- active revision $3 and of each of its companions (the Agent's other runtime holders), only
-- when $3 has withdrawal rows at all; one withdrawal work per collected row that needs an
-- attempt, its requester as actor. One row per collected revision: its id, the key enqueued
-- (NULL when the row needed no attempt). $1 namespace id, $2 agent id, $3 revision id.
WITH holders AS (
    SELECT $3::text AS id
    UNION
    SELECT h FROM occ.runtime_holders($2) h
),
firsts AS (
    SELECT DISTINCT ON (w.revision_id) w
    FROM occ.credential_withdrawals w
    JOIN holders h ON h.id = w.revision_id
    WHERE w.namespace_id = $1 AND w.agent_id = $2 AND w.state = 'pending'
      AND EXISTS (SELECT 1 FROM occ.credential_withdrawals own
                  WHERE own.namespace_id = $1 AND own.revision_id = $3)
      AND EXISTS (SELECT 1 FROM occ.credential_sources c
                  WHERE c.namespace_id = w.namespace_id AND c.id = w.source_id)
    ORDER BY w.revision_id, occ.credential_withdrawal_awaits_replay(w.last_reason),
             w.requested_at, w.source_id
)
SELECT (f.w).revision_id,
       CASE WHEN occ.credential_withdrawal_needs_attempt(f.w)
            THEN occ.credential_withdrawal_enqueue($1, $2, (f.w).revision_id, (f.w).requested_by,
                                                   NULL, 0)
       END AS enqueued
FROM firsts f
