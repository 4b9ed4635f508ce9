-- The draw of a Namespace id, a function of its own so it is one place (and a test can make it
-- collide): 'ns-' and 32 random bits. A taken id is drawn again by `occ.namespace_create`
-- (SPEC N1). Among n Namespaces (deleted ones keep their ids) a draw is taken with probability
-- n / 2^32; the id keeps its form (Kubernetes and Docker names are built from it), and at most
-- eight draws are made (with a million Namespaces, eight taken draws in a row are a 1-in-10^29
-- event) before the creation fails with a clear error instead of looping.
CREATE OR REPLACE FUNCTION occ.namespace_new_id() RETURNS text LANGUAGE sql VOLATILE
    RETURN 'ns-' || substr(md5(gen_random_uuid()::text), 1, 8);
