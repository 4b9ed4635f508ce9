-- SPEC G2, G9: whether a revision has repository credentials, and whether under a standing
-- approval. $1 revision id.
SELECT repository_credentials IS NOT NULL AS repository,
       coalesce(repository_credentials ? 'standingApprovalId', false) AS standing
FROM occ.agent_revisions WHERE id = $1
