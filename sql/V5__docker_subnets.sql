-- Namespace subnet reservations (SPEC C2, N3, N4): which subnet of a driver's address pool
-- each Namespace holds, so concurrent creators in any number of worker processes never aim
-- at the same subnet. Forward-only; never edit once landed.
--
-- A row is written, claim-fenced, by the Namespace's ensure pass before the driver creates
-- anything on the subnet (sql/queries/docker_subnet_reserve.sql), reused by every later pass
-- of that Namespace (a crash between reserving and creating leaks nothing), moved only when
-- the infrastructure refuses the subnet as taken by something the table does not know, and
-- deleted by the claim-fenced tombstone (sql/queries/namespace_tombstone.sql).
-- One reservation per Namespace (primary key); no two reservations share an address, whatever
-- pool setting each was made under (exclusion constraint).
CREATE TABLE occ.docker_subnets (
    namespace_id  text CHECK (occ.is_ident(namespace_id)) PRIMARY KEY
                  REFERENCES occ.namespaces_all (id),
    pool          cidr NOT NULL CHECK (family(pool) = 4),
    subnet        cidr NOT NULL CHECK (family(subnet) = 4),
    reserved_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (subnet <<= pool),
    CONSTRAINT docker_subnets_disjoint EXCLUDE USING gist (subnet inet_ops WITH &&)
);
