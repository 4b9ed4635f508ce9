-- Kept for callers that name no mode: the dedicated version, else any approved one.
CREATE OR REPLACE FUNCTION occ.agent_default_harness_version(p_harness text) RETURNS text
LANGUAGE sql STABLE
    RETURN (SELECT version FROM occ.approved_harnesses WHERE harness_id = p_harness
            ORDER BY mode = 'dedicated' DESC, mode LIMIT 1);
