//! IPv4 subnet arithmetic for Namespace address pools, and the ledger seam through which a
//! driver reserves a Namespace's subnet before it asks the infrastructure for it.
//!
//! The Docker daemon's default address pools hold only ~31 bridge networks, so the Docker
//! driver gives every Namespace network an explicit subnet from a dedicated pool
//! (`OCC_DOCKER_SUBNET_POOL`, default `172.16.0.0/16:24`: the `/24`s of `172.16.0.0/16`,
//! outside Docker's defaults). This module owns parsing CIDRs and pools, overlap tests, the
//! choice of the first free candidate, the `SubnetLedger` contract (implemented over
//! PostgreSQL, claim-fenced, by `reconcile::subnets`) and `MemoryLedger`, the process-local
//! ledger of a driver used without a database. It is pure `std::net::Ipv4Addr` arithmetic
//! and bookkeeping: it never talks to the daemon and never to the database.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// The most subnets one pool may be split into, which bounds the candidate scan.
const MAX_POOL_SUBNETS_LOG2: u8 = 16;
/// The longest subnet prefix a bridge can use: a gateway and at least one container.
const MAX_SUBNET_PREFIX: u8 = 30;

/// An IPv4 network `address/prefix`, its host bits always zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    network: u32,
    prefix: u8,
}

impl Ipv4Cidr {
    /// The network of `address/prefix` (host bits cleared); `None` when `prefix` exceeds 32.
    pub fn new(address: Ipv4Addr, prefix: u8) -> Option<Ipv4Cidr> {
        (prefix <= 32).then(|| Ipv4Cidr {
            network: u32::from(address) & mask(prefix),
            prefix,
        })
    }

    /// Parses `a.b.c.d/n`, clearing any host bits (as the daemon reports subnets). IPv6 and
    /// anything else malformed is `None`.
    pub fn parse(text: &str) -> Option<Ipv4Cidr> {
        let (address, prefix) = text.trim().split_once('/')?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Ipv4Cidr::new(address.parse().ok()?, prefix.parse().ok()?)
    }

    pub fn prefix(self) -> u8 {
        self.prefix
    }

    pub fn address(self) -> Ipv4Addr {
        Ipv4Addr::from(self.network)
    }

    /// The first and last addresses of the network, inclusive.
    fn range(self) -> (u32, u32) {
        (self.network, self.network | !mask(self.prefix))
    }

    /// Whether the two networks share at least one address.
    pub fn overlaps(self, other: Ipv4Cidr) -> bool {
        let (a_first, a_last) = self.range();
        let (b_first, b_last) = other.range();
        a_first <= b_last && b_first <= a_last
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address(), self.prefix)
    }
}

/// The netmask of a prefix length (0..=32).
fn mask(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p.min(32))),
    }
}

/// A dedicated address pool split into equal subnets: `172.16.0.0/16:24` is the 256 `/24`s of
/// `172.16.0.0/16`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubnetPool {
    pool: Ipv4Cidr,
    subnet_prefix: u8,
}

/// Why a pool setting was refused; `Display` says what a valid one looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubnetPoolError {
    /// Not `a.b.c.d/n:m`.
    Syntax,
    /// The pool address has bits set beyond its prefix (`172.16.1.0/16`).
    HostBits,
    /// The subnet prefix is shorter than the pool's or longer than `/30`.
    SubnetPrefix,
    /// More than 65536 subnets.
    TooManySubnets,
}

impl fmt::Display for SubnetPoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubnetPoolError::Syntax => {
                "must be POOL_CIDR:SUBNET_PREFIX, an IPv4 network and a prefix length such as 172.16.0.0/16:24"
            }
            SubnetPoolError::HostBits => "must name a network address (no bits set past its prefix)",
            SubnetPoolError::SubnetPrefix => {
                "must have a subnet prefix between the pool's prefix and 30"
            }
            SubnetPoolError::TooManySubnets => "must split into at most 65536 subnets",
        })
    }
}

impl std::error::Error for SubnetPoolError {}

impl SubnetPool {
    /// The default setting: the `/24`s of `172.16.0.0/16` (256 Namespaces).
    pub const DEFAULT: &'static str = "172.16.0.0/16:24";

    /// A pool of the `/subnet_prefix` subnets of `pool`.
    pub fn new(pool: Ipv4Cidr, subnet_prefix: u8) -> Result<SubnetPool, SubnetPoolError> {
        if subnet_prefix < pool.prefix || subnet_prefix > MAX_SUBNET_PREFIX {
            return Err(SubnetPoolError::SubnetPrefix);
        }
        if subnet_prefix - pool.prefix > MAX_POOL_SUBNETS_LOG2 {
            return Err(SubnetPoolError::TooManySubnets);
        }
        Ok(SubnetPool {
            pool,
            subnet_prefix,
        })
    }

    /// The pool's whole network (`172.16.0.0/16` of `172.16.0.0/16:24`).
    pub fn network(&self) -> Ipv4Cidr {
        self.pool
    }

    /// The prefix length of every subnet of the pool (`24` of `172.16.0.0/16:24`).
    pub fn subnet_prefix(&self) -> u8 {
        self.subnet_prefix
    }

    /// Whether `subnet` is exactly one of the pool's subnets.
    pub fn contains(&self, subnet: Ipv4Cidr) -> bool {
        subnet.prefix == self.subnet_prefix && self.pool.overlaps(subnet)
    }

    /// How many subnets the pool holds.
    pub fn capacity(&self) -> u32 {
        1 << (self.subnet_prefix - self.pool.prefix)
    }

    /// Every subnet of the pool, lowest first.
    pub fn candidates(&self) -> impl Iterator<Item = Ipv4Cidr> + '_ {
        let step = 1u64 << (32 - u32::from(self.subnet_prefix));
        (0..u64::from(self.capacity())).map(move |i| Ipv4Cidr {
            // Cannot overflow: the pool's last address bounds every candidate.
            network: self.pool.network + (i * step) as u32,
            prefix: self.subnet_prefix,
        })
    }

    /// The lowest subnet of the pool that overlaps none of `taken`; `None` when the pool is
    /// exhausted.
    pub fn first_free(&self, taken: &[Ipv4Cidr]) -> Option<Ipv4Cidr> {
        let relevant: Vec<Ipv4Cidr> = taken
            .iter()
            .copied()
            .filter(|t| t.overlaps(self.pool))
            .collect();
        self.candidates()
            .find(|c| !relevant.iter().any(|t| t.overlaps(*c)))
    }
}

impl Default for SubnetPool {
    fn default() -> SubnetPool {
        SubnetPool::from_str(SubnetPool::DEFAULT).expect("the default pool is valid")
    }
}

impl FromStr for SubnetPool {
    type Err = SubnetPoolError;

    /// Parses `a.b.c.d/n:m`, strictly: the pool must be a network address.
    fn from_str(text: &str) -> Result<SubnetPool, SubnetPoolError> {
        let (pool, subnet_prefix) = text.trim().split_once(':').ok_or(SubnetPoolError::Syntax)?;
        let (address, _) = pool.split_once('/').ok_or(SubnetPoolError::Syntax)?;
        let address: Ipv4Addr = address.parse().map_err(|_| SubnetPoolError::Syntax)?;
        let pool = Ipv4Cidr::parse(pool).ok_or(SubnetPoolError::Syntax)?;
        if pool.address() != address {
            return Err(SubnetPoolError::HostBits);
        }
        if subnet_prefix.is_empty() || !subnet_prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SubnetPoolError::Syntax);
        }
        let subnet_prefix: u8 = subnet_prefix
            .parse()
            .map_err(|_| SubnetPoolError::SubnetPrefix)?;
        SubnetPool::new(pool, subnet_prefix)
    }
}

impl fmt::Display for SubnetPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.pool, self.subnet_prefix)
    }
}

/// Why a `SubnetLedger` could not answer. The ledger's owner keeps the underlying error (a
/// lost claim, a database failure) and reports it itself; the driver only stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerUnavailable;

/// Where a driver reserves one Namespace's subnet before it creates anything on it, so that
/// two creators, in one process or many, never aim at the same subnet.
///
/// A ledger serves exactly one Namespace. Reservations are idempotent: asking again returns
/// the Namespace's current reservation, so a pass that crashed between reserving and creating
/// reuses it. A reservation lives until the Namespace is gone (the tombstone releases it).
pub trait SubnetLedger {
    /// Reserves a subnet of `pool` for the Namespace and returns it: its current reservation
    /// if that is one of `pool`'s subnets and overlaps nothing in `avoid`; otherwise the lowest
    /// subnet of `pool` overlapping neither another Namespace's reservation nor anything in
    /// `avoid` (the reservation moves there). `Ok(None)`: no such subnet, the pool is
    /// exhausted.
    fn reserve(
        &self,
        pool: &SubnetPool,
        avoid: &[Ipv4Cidr],
    ) -> Result<Option<Ipv4Cidr>, LedgerUnavailable>;
}

/// The reservations of one process, by Namespace id: the ledger of a driver used without a
/// database (driver tests, tools). Workers never use it: with two processes it cannot keep
/// them apart.
#[derive(Debug, Default)]
pub struct MemoryLedger {
    reserved: Mutex<HashMap<String, Ipv4Cidr>>,
}

impl MemoryLedger {
    /// The ledger of one Namespace.
    pub fn namespace<'a>(&'a self, namespace_id: &'a str) -> MemoryNamespaceLedger<'a> {
        MemoryNamespaceLedger {
            ledger: self,
            namespace_id,
        }
    }

    /// Releases the Namespace's reservation, if any.
    pub fn release(&self, namespace_id: &str) {
        self.reserved.lock().remove(namespace_id);
    }
}

/// `MemoryLedger`'s view of one Namespace.
pub struct MemoryNamespaceLedger<'a> {
    ledger: &'a MemoryLedger,
    namespace_id: &'a str,
}

impl SubnetLedger for MemoryNamespaceLedger<'_> {
    fn reserve(
        &self,
        pool: &SubnetPool,
        avoid: &[Ipv4Cidr],
    ) -> Result<Option<Ipv4Cidr>, LedgerUnavailable> {
        let mut reserved = self.ledger.reserved.lock();
        if let Some(current) = reserved.get(self.namespace_id) {
            if pool.contains(*current) && !avoid.iter().any(|a| a.overlaps(*current)) {
                return Ok(Some(*current));
            }
        }
        let mut taken: Vec<Ipv4Cidr> = reserved
            .iter()
            .filter(|(id, _)| id.as_str() != self.namespace_id)
            .map(|(_, subnet)| *subnet)
            .collect();
        taken.extend_from_slice(avoid);
        let chosen = pool.first_free(&taken);
        if let Some(subnet) = chosen {
            reserved.insert(self.namespace_id.to_string(), subnet);
        }
        Ok(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Ipv4Cidr {
        Ipv4Cidr::parse(text).expect(text)
    }

    #[test]
    fn cidrs_are_parsed_and_normalised() {
        assert_eq!(cidr("172.16.0.0/16").to_string(), "172.16.0.0/16");
        assert_eq!(cidr("172.17.0.1/16").to_string(), "172.17.0.0/16");
        assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
        assert_eq!(cidr("10.1.2.3/32").to_string(), "10.1.2.3/32");
        for bad in [
            "",
            "172.16.0.0",
            "172.16.0.0/33",
            "172.16.0.0/",
            "172.16.0.0/+8",
            "172.16.0/16",
            "fd00::/64",
            "2001:db8::/32",
        ] {
            assert_eq!(Ipv4Cidr::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn overlap_is_any_shared_address() {
        let pool = cidr("172.16.0.0/16");
        assert!(pool.overlaps(cidr("172.16.5.0/24")));
        assert!(cidr("172.16.5.0/24").overlaps(pool));
        assert!(pool.overlaps(cidr("172.0.0.0/8")));
        assert!(pool.overlaps(cidr("172.16.255.255/32")));
        assert!(!pool.overlaps(cidr("172.17.0.0/16")));
        assert!(!pool.overlaps(cidr("172.15.255.0/24")));
        assert!(cidr("0.0.0.0/0").overlaps(cidr("255.255.255.255/32")));
        assert!(!cidr("172.16.0.0/24").overlaps(cidr("172.16.1.0/24")));
    }

    #[test]
    fn pools_are_parsed_strictly() {
        let pool: SubnetPool = "172.16.0.0/16:24".parse().unwrap();
        assert_eq!(pool, SubnetPool::default());
        assert_eq!(pool.capacity(), 256);
        assert_eq!(pool.to_string(), "172.16.0.0/16:24");
        assert_eq!(
            " 10.0.0.0/8:24 ".parse::<SubnetPool>().unwrap().capacity(),
            65536
        );
        for (bad, why) in [
            ("172.16.0.0/16", SubnetPoolError::Syntax),
            ("172.16.0.0:24", SubnetPoolError::Syntax),
            ("172.16.0.0/16:", SubnetPoolError::Syntax),
            ("172.16.0.0/16:x", SubnetPoolError::Syntax),
            ("fd00::/64:80", SubnetPoolError::Syntax),
            ("172.16.1.0/16:24", SubnetPoolError::HostBits),
            ("172.16.0.0/16:8", SubnetPoolError::SubnetPrefix),
            ("172.16.0.0/16:31", SubnetPoolError::SubnetPrefix),
            ("172.16.0.0/16:300", SubnetPoolError::SubnetPrefix),
            ("10.0.0.0/8:25", SubnetPoolError::TooManySubnets),
        ] {
            assert_eq!(bad.parse::<SubnetPool>(), Err(why), "{bad}");
        }
    }

    #[test]
    fn candidates_tile_the_pool_in_order() {
        let pool: SubnetPool = "10.9.0.0/22:24".parse().unwrap();
        let all: Vec<String> = pool.candidates().map(|c| c.to_string()).collect();
        assert_eq!(
            all,
            ["10.9.0.0/24", "10.9.1.0/24", "10.9.2.0/24", "10.9.3.0/24"]
        );
        // The top of the address space does not overflow.
        let top: SubnetPool = "255.255.255.0/24:30".parse().unwrap();
        assert_eq!(
            top.candidates().last().unwrap().to_string(),
            "255.255.255.252/30"
        );
    }

    #[test]
    fn the_first_subnet_overlapping_nothing_is_chosen() {
        let pool = SubnetPool::default();
        assert_eq!(pool.first_free(&[]), Some(cidr("172.16.0.0/24")));
        // Docker's own bridge and unrelated networks do not take from the pool.
        let taken = [
            cidr("172.17.0.0/16"),
            cidr("192.168.0.0/20"),
            cidr("172.16.0.0/24"),
            cidr("172.16.1.128/25"),
            cidr("172.16.3.0/24"),
        ];
        assert_eq!(pool.first_free(&taken), Some(cidr("172.16.2.0/24")));
        // A wider network covering the pool's start takes every subnet inside it.
        assert_eq!(
            pool.first_free(&[cidr("172.16.0.0/20")]),
            Some(cidr("172.16.16.0/24"))
        );
    }

    #[test]
    fn a_covered_pool_is_exhausted() {
        let pool: SubnetPool = "10.9.0.0/23:24".parse().unwrap();
        assert_eq!(
            pool.first_free(&[cidr("10.9.0.0/24"), cidr("10.9.1.7/32")]),
            None
        );
        assert_eq!(
            SubnetPool::default().first_free(&[cidr("172.0.0.0/8")]),
            None
        );
    }

    #[test]
    fn memory_reservations_are_kept_moved_and_released() {
        let pool: SubnetPool = "10.9.0.0/22:24".parse().unwrap();
        let ledger = MemoryLedger::default();
        let a = ledger.namespace("a");
        let b = ledger.namespace("b");
        assert_eq!(a.reserve(&pool, &[]), Ok(Some(cidr("10.9.0.0/24"))));
        // Asking again reuses the reservation; another Namespace gets another subnet.
        assert_eq!(a.reserve(&pool, &[]), Ok(Some(cidr("10.9.0.0/24"))));
        assert_eq!(b.reserve(&pool, &[]), Ok(Some(cidr("10.9.1.0/24"))));
        // A reservation overlapping something to avoid moves past it and past b's.
        assert_eq!(
            a.reserve(&pool, &[cidr("10.9.0.128/25")]),
            Ok(Some(cidr("10.9.2.0/24")))
        );
        // A reservation outside a changed pool moves into it.
        let other: SubnetPool = "10.10.0.0/23:24".parse().unwrap();
        assert_eq!(b.reserve(&other, &[]), Ok(Some(cidr("10.10.0.0/24"))));
        ledger.release("a");
        assert_eq!(
            ledger.namespace("c").reserve(&pool, &[]),
            Ok(Some(cidr("10.9.0.0/24")))
        );
        let tiny: SubnetPool = "10.10.0.0/24:24".parse().unwrap();
        assert_eq!(ledger.namespace("d").reserve(&tiny, &[]), Ok(None));
    }

    #[test]
    fn pools_know_their_own_subnets() {
        let pool: SubnetPool = "10.9.0.0/22:24".parse().unwrap();
        assert_eq!(pool.network(), cidr("10.9.0.0/22"));
        assert_eq!(pool.subnet_prefix(), 24);
        assert!(pool.contains(cidr("10.9.3.0/24")));
        assert!(!pool.contains(cidr("10.9.4.0/24")));
        assert!(!pool.contains(cidr("10.9.0.0/25")));
    }
}
