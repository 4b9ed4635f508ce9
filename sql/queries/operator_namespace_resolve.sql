-- Operator reads: the id of a live Namespace named by $1 (id or name); raises "no Namespace"
-- (no_data_found) otherwise.
SELECT occ.resolve_namespace($1)
