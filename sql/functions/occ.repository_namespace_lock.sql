-- SPEC G8: the id of the ready Namespace a repository policy change names (by id or name),
-- its row locked FOR SHARE so a deletion waits for the change, after `administer` on it is
-- checked for the actor.
CREATE OR REPLACE FUNCTION occ.repository_namespace_lock(p_actor text, p_namespace text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    ns text := occ.agent_ready_namespace(p_namespace);
BEGIN
    PERFORM 1 FROM occ.namespaces_all WHERE id = ns FOR SHARE;
    PERFORM occ.agent_require(p_actor, 'administer', 'namespace', ns, ns);
    RETURN ns;
END $$;
