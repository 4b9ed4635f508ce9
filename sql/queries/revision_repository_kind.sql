-- SPEC G2, G9, G14: whether a revision has repository credentials, whether under a standing
-- approval, and whether its deadline has passed on the database clock (never for a standing
-- revision, which has none). $1 revision id.
SELECT repository_credentials IS NOT NULL AS repository,
       coalesce(repository_credentials ? 'standingApprovalId', false) AS standing,
       coalesce((repository_credentials ->> 'deadlineAt')::timestamptz <= clock_timestamp(), false)
           AS past_deadline
FROM occ.agent_revisions WHERE id = $1
