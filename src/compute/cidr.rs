//! Network prefixes as Kubernetes NetworkPolicy `ipBlock`s take them (SPEC S3, C3): the one
//! canonical spelling of an IPv4 or IPv6 network, shared by the driver file's `apiServerCidrs`
//! and the Installation's egress rules. Pure functions; it never talks to anything.

use std::net::IpAddr;

/// `address/prefix` as a NetworkPolicy `ipBlock` takes it, when it is a network: an IPv4 or
/// IPv6 address, a prefix length within its size, and no host bits set.
pub fn canonical_cidr(text: &str) -> Option<String> {
    let (address, prefix) = text.split_once('/')?;
    if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix: u32 = prefix.parse().ok()?;
    let address: IpAddr = address.parse().ok()?;
    // Shifting the prefix out leaves the host bits; a full-length prefix has none.
    let host_bits_clear = match address {
        IpAddr::V4(v4) => prefix <= 32 && u32::from(v4).checked_shl(prefix).unwrap_or(0) == 0,
        IpAddr::V6(v6) => prefix <= 128 && u128::from(v6).checked_shl(prefix).unwrap_or(0) == 0,
    };
    host_bits_clear.then(|| format!("{address}/{prefix}"))
}
