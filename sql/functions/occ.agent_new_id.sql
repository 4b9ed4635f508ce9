CREATE OR REPLACE FUNCTION occ.agent_new_id(prefix text) RETURNS text LANGUAGE sql VOLATILE
    RETURN prefix || '-' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 20);
