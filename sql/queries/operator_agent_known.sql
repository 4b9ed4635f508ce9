-- Operator reads: whether an Agent has the id or name $1, in the Namespace $2 (NULL: any).
SELECT EXISTS (SELECT 1 FROM occ.agents
               WHERE (id = $1 OR name = $1) AND ($2::text IS NULL OR namespace_id = $2))
