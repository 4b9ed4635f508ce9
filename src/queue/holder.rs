//! The worker process that holds a claim (SPEC Q4, W7): an id drawn once per process, the
//! host and the pid. `worker.started` announces it and every claim the process takes names it
//! (V29), so an operator sees which process holds a work and since when.
//!
//! Owns that identity only; it must never carry anything secret: all three are printed.

use std::sync::OnceLock;

/// A worker process as a claim names it. Copy, so `QueueOptions` stays a plain value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// A random UUID (v4) drawn when the process first asks.
    pub id: &'static str,
    /// The host name, as the kernel reports it (in Kubernetes, the Pod's name).
    pub host: &'static str,
    pub pid: u32,
}

impl Holder {
    /// This process: the same value on every call.
    pub fn this_process() -> Holder {
        static THIS: OnceLock<Holder> = OnceLock::new();
        *THIS.get_or_init(|| Holder {
            id: Box::leak(random_uuid().into_boxed_str()),
            host: Box::leak(host_name().into_boxed_str()),
            pid: std::process::id(),
        })
    }

    /// The pid as the `integer` column holds it (Linux pids are below 2^22).
    pub fn pid_column(&self) -> i32 {
        i32::try_from(self.pid).unwrap_or(i32::MAX)
    }
}

/// A version 4 UUID from the kernel's random source. Without one (no `/dev/urandom`), the
/// bits come from the clock, the pid and the host: unique enough to tell processes apart.
fn random_uuid() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let drawn = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if drawn.is_err() {
        use sha2::{Digest, Sha256};
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let seed = format!("{nanos}/{}/{}", std::process::id(), host_name());
        bytes.copy_from_slice(&Sha256::digest(seed.as_bytes())[..16]);
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The host name (`gethostname(2)`), or `unknown` when the kernel gives none; at most 255
/// bytes, as V29's constraint bounds it.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed with it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..len]).trim().to_owned();
    if rc != 0 || name.is_empty() {
        return "unknown".into();
    }
    let mut end = name.len().min(255);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_is_one_holder_with_a_v4_uuid_a_host_and_its_pid() {
        let holder = Holder::this_process();
        assert_eq!(holder, Holder::this_process());
        assert_eq!(holder.pid, std::process::id());
        assert!(!holder.host.is_empty() && holder.host.len() <= 255);
        let id = holder.id.as_bytes();
        assert_eq!(id.len(), 36, "{}", holder.id);
        assert_eq!(
            (id[8], id[13], id[14], id[18], id[23]),
            (b'-', b'-', b'4', b'-', b'-')
        );
        assert!(matches!(id[19], b'8' | b'9' | b'a' | b'b'), "{}", holder.id);
    }
}
