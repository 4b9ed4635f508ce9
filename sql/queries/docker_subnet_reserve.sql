-- Reserves a subnet of a pool for one Namespace (SPEC C2) and returns it; always one row.
-- Keeps the Namespace's current reservation if it is one of the pool's subnets and overlaps
-- nothing to avoid; otherwise moves it to (or inserts) the lowest subnet of the pool that
-- overlaps neither another Namespace's reservation nor anything to avoid.
-- Run after docker_subnet_lock.sql in a claim-fenced transaction.
-- $1 namespace id, $2 pool network (text cidr), $3 subnet prefix, $4 subnets to avoid
-- (text cidr[]: networks the infrastructure holds that this table does not know).
-- Returns subnet (text, NULL when nothing was reserved) and free (whether the pool had a
-- candidate): NULL and not free means the pool is exhausted.
WITH pool AS (
    SELECT $2::text::cidr AS net, $3::int AS prefix
), avoid AS (
    SELECT a::cidr AS subnet FROM unnest($4::text[]) a
), current AS (
    SELECT s.subnet FROM occ.docker_subnets s WHERE s.namespace_id = $1
), keep AS (
    SELECT c.subnet FROM current c, pool p
    WHERE c.subnet <<= p.net AND masklen(c.subnet) = p.prefix
      AND NOT EXISTS (SELECT 1 FROM avoid a WHERE a.subnet && c.subnet)
), candidate AS (
    -- generate_series yields the pool's subnets lowest first; LIMIT stops at the first free.
    SELECT c.subnet
    FROM pool p,
         generate_series(0::bigint, (1::bigint << (p.prefix - masklen(p.net))) - 1) i,
         LATERAL (SELECT network(set_masklen(
             p.net::inet + i * (1::bigint << (32 - p.prefix)), p.prefix)) AS subnet) c
    WHERE NOT EXISTS (SELECT 1 FROM keep)
      AND NOT EXISTS (SELECT 1 FROM occ.docker_subnets s
                      WHERE s.subnet && c.subnet AND s.namespace_id <> $1)
      AND NOT EXISTS (SELECT 1 FROM avoid a WHERE a.subnet && c.subnet)
    LIMIT 1
), moved AS (
    UPDATE occ.docker_subnets s
    SET pool = p.net, subnet = c.subnet, reserved_at = clock_timestamp()
    FROM candidate c, pool p
    WHERE s.namespace_id = $1
    RETURNING s.subnet
), inserted AS (
    INSERT INTO occ.docker_subnets (namespace_id, pool, subnet)
    SELECT $1, p.net, c.subnet FROM candidate c, pool p
    WHERE NOT EXISTS (SELECT 1 FROM current)
    ON CONFLICT DO NOTHING
    RETURNING subnet
)
SELECT (SELECT subnet FROM keep
        UNION ALL SELECT subnet FROM moved
        UNION ALL SELECT subnet FROM inserted
        LIMIT 1)::text AS subnet,
       EXISTS (SELECT 1 FROM keep) OR EXISTS (SELECT 1 FROM candidate) AS free
