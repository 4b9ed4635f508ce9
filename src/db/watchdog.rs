//! The database watchdog (SPEC W5): one named thread, `occ-db-watchdog`, that bounds every
//! wait on a database connection from the client side.
//!
//! The `postgres` crate offers no read deadline: a server (or a path to it) that stops answering
//! while its kernel still acknowledges our packets leaves a query waiting forever, and neither
//! keepalive nor `tcp_user_timeout` fires. The watchdog looks at this process's TCP sockets to
//! the database's ports; a socket whose last event was *us sending* a request, with no data
//! received for longer than the database timeout, is shut down. The thread blocked on it then
//! gets an end-of-file, its statement fails as a lost connection, and the pool discards the
//! connection. It never reads or writes a byte of the protocol, and never touches a socket
//! that is not connected to a database port, or one whose last answer came after its last
//! request (the LISTEN connection pings well within the timeout).
//!
//! It looks only while something may wait: a pooled connection is checked out (the pool's
//! events), a connection is being opened or closed, or a dedicated connection's statement runs
//! (`waiting`). It sleeps until the oldest such wait could have stalled, then looks a few times
//! a second while one is that old; with nothing outstanding it does not wake at all, and short
//! waits that end before their deadline cost it at most a wake-up per timeout (an idle worker
//! costs it nearly nothing). On anything but Linux it is a no-op.

use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What may wait on the database right now: each outstanding wait by key, since when.
struct Waits {
    since: BTreeMap<u64, Instant>,
    /// Watchdogs asleep with nothing to watch: the next wait to begin wakes them. One that
    /// sleeps until its oldest wait could stall needs no word of a younger one.
    idle: usize,
}

static WAITS: Mutex<Waits> = Mutex::new(Waits {
    since: BTreeMap::new(),
    idle: 0,
});
/// Notified when a wait begins while a watchdog is idle, when the database turns suspect, and
/// when a watchdog stops.
static CHANGED: Condvar = Condvar::new();

/// Wakes every watchdog to look at its deadlines again (the database turned suspect, or the
/// process is closing: waits are shorter now).
pub(super) fn deadlines_changed() {
    CHANGED.notify_all();
}
/// Keys of `waiting` guards: the high bit set, apart from the pool's connection ids.
static NEXT_GUARD: AtomicU64 = AtomicU64::new(1 << 63);

fn begin(key: u64) {
    let mut waits = WAITS.lock();
    waits.since.insert(key, Instant::now());
    let idle = waits.idle > 0;
    drop(waits);
    if idle {
        CHANGED.notify_all();
    }
}

fn end(key: u64) {
    WAITS.lock().since.remove(&key);
}

/// A wait on the database outside a pooled check-out (opening or closing a connection, a
/// dedicated connection's statement): watched while the guard lives.
pub struct Waiting(u64);

/// Marks the start of a wait the watchdog must bound; it ends when the guard drops.
pub fn waiting() -> Waiting {
    let key = NEXT_GUARD.fetch_add(1, Ordering::Relaxed);
    begin(key);
    Waiting(key)
}

impl Drop for Waiting {
    fn drop(&mut self) {
        end(self.0);
    }
}

/// The pool's check-outs and check-ins, as waits (`db::pool` installs it).
#[derive(Debug)]
pub struct PoolEvents;

impl r2d2::HandleEvent for PoolEvents {
    fn handle_checkout(&self, event: r2d2::event::CheckoutEvent) {
        begin(event.connection_id());
    }

    fn handle_checkin(&self, event: r2d2::event::CheckinEvent) {
        end(event.connection_id());
    }
}

/// The running watchdog; stopped and joined on drop.
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    shut_down: Arc<AtomicU64>,
}

impl Watchdog {
    /// Watches TCP connections to the ports of `url`; a request unanswered for `stall` (less
    /// one tick, so the wait ends by `stall`) gets its socket shut down. `None` when the URL names no TCP host (Unix sockets only).
    pub fn start(url: &str, stall: Duration) -> Result<Option<Watchdog>, super::DbError> {
        let (rest, _) = super::tls::split(url).map_err(super::DbError::InvalidTls)?;
        let config: postgres::Config = rest.parse().map_err(super::DbError::InvalidUrl)?;
        let tcp = config
            .get_hosts()
            .iter()
            .any(|h| matches!(h, postgres::config::Host::Tcp(_)))
            || !config.get_hostaddrs().is_empty();
        if !tcp {
            return Ok(None);
        }
        let mut ports: Vec<u16> = config.get_ports().to_vec();
        if ports.is_empty() {
            ports.push(5432);
        }
        let shut_down = Arc::new(AtomicU64::new(0));
        let counter = shut_down.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let tick = (stall / 4).clamp(Duration::from_millis(20), Duration::from_millis(200));
        let suspect_tick = tick.min(super::SUSPECT_WAIT / 4);
        // One tick early, so a stalled wait ends by the timeout, not a tick after it.
        let stall = stall.saturating_sub(tick);
        let handle = std::thread::Builder::new()
            .name("occ-db-watchdog".into())
            .spawn(move || {
                let mut waits = WAITS.lock();
                while !stopped.load(Ordering::SeqCst) {
                    let Some(oldest) = waits.since.values().min().copied() else {
                        // Nothing may wait: sleep until something does.
                        waits.idle += 1;
                        CHANGED.wait(&mut waits);
                        waits.idle -= 1;
                        continue;
                    };
                    // While the database is suspect (or the process is closing), a request
                    // unanswered for SUSPECT_WAIT is as dead as one unanswered for the timeout.
                    let suspect = super::is_suspect();
                    let (limit, tick) = if suspect {
                        (stall.min(super::SUSPECT_WAIT), suspect_tick)
                    } else {
                        (stall, tick)
                    };
                    if Instant::now() < oldest + limit {
                        // Nothing can have stalled yet: sleep until the oldest wait could have
                        // (a suspect database wakes it sooner). Waits that end meanwhile
                        // cost nothing; a younger one's deadline is later.
                        CHANGED.wait_until(&mut waits, oldest + limit);
                        continue;
                    }
                    let limit_ms = limit.as_millis().min(u32::MAX as u128) as u32;
                    let n =
                        parking_lot::MutexGuard::unlocked(&mut waits, || sweep(&ports, limit_ms));
                    counter.fetch_add(n, Ordering::Relaxed);
                    CHANGED.wait_for(&mut waits, tick);
                }
            })
            .map_err(super::DbError::Thread)?;
        Ok(Some(Watchdog {
            stop,
            handle: Some(handle),
            shut_down,
        }))
    }

    /// How many stalled connections the watchdog has shut down so far.
    pub fn shut_down(&self) -> u64 {
        self.shut_down.load(Ordering::Relaxed)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        {
            // Under the lock, so the thread is either before its check or already waiting.
            let _waits = WAITS.lock();
            self.stop.store(true, Ordering::SeqCst);
        }
        CHANGED.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One look at every database socket; returns how many were shut down.
#[cfg(target_os = "linux")]
fn sweep(ports: &[u16], stall_ms: u32) -> u64 {
    let inodes = linux::database_sockets(ports);
    if inodes.is_empty() {
        return 0;
    }
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut shut = 0;
    for entry in fds.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Some(inode) = std::fs::read_link(entry.path())
            .ok()
            .and_then(|target| linux::socket_inode(&target.to_string_lossy()))
        else {
            continue;
        };
        if inodes.contains(&inode) && linux::shut_down_if_stalled(fd, inode, stall_ms) {
            shut += 1;
        }
    }
    shut
}

#[cfg(not(target_os = "linux"))]
fn sweep(_ports: &[u16], _stall_ms: u32) -> u64 {
    0
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashSet;
    use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;

    /// `socket:[12345]` → 12345.
    pub fn socket_inode(link: &str) -> Option<u64> {
        link.strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()
    }

    /// Inodes of established TCP sockets (IPv4 and IPv6) whose remote port is one of `ports`.
    pub fn database_sockets(ports: &[u16]) -> HashSet<u64> {
        let mut out = HashSet::new();
        for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
            let Ok(text) = std::fs::read_to_string(table) else {
                continue;
            };
            for line in text.lines().skip(1) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                if fields.len() < 10 || fields[3] != "01" {
                    continue;
                }
                let port = fields[2]
                    .rsplit_once(':')
                    .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
                if port.is_some_and(|p| ports.contains(&p)) {
                    if let Ok(inode) = fields[9].parse() {
                        out.insert(inode);
                    }
                }
            }
        }
        out
    }

    /// Shuts `fd` down when it is still socket `inode` and its last event was a request sent
    /// more than `stall_ms` ago with nothing received since.
    pub fn shut_down_if_stalled(fd: i32, inode: u64, stall_ms: u32) -> bool {
        // SAFETY: the descriptor is only duplicated. If another thread closed it meanwhile the
        // duplication fails (EBADF); if the number was reused, the inode check below refuses
        // the duplicate. Nothing is done through the borrowed descriptor itself.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let Ok(owned) = borrowed.try_clone_to_owned() else {
            return false;
        };
        let file = std::fs::File::from(owned);
        if file.metadata().ok().map(|m| m.ino()) != Some(inode) {
            return false;
        }
        let owned = OwnedFd::from(file);
        let Some((last_sent, last_received)) = last_data(&owned) else {
            return false;
        };
        // `TCP_INFO` counts in jiffies: a request sent in the same tick as the last answer (a
        // fresh connection's startup message, a statement right after the previous answer)
        // shows as equal times, so equal counts as unanswered. The price: a pooled connection
        // idle for the whole timeout after such an exchange is shut down too, and the pool's
        // check-out test replaces it.
        if last_sent <= last_received && last_sent >= stall_ms {
            // Shutting down the duplicate shuts down the socket: the blocked reader wakes with
            // an end-of-file and the statement fails as a lost connection.
            let stream = std::net::TcpStream::from(owned);
            return stream.shutdown(std::net::Shutdown::Both).is_ok();
        }
        false
    }

    /// Milliseconds since data was last sent and last received on the socket (`TCP_INFO`).
    fn last_data(fd: &OwnedFd) -> Option<(u32, u32)> {
        // SAFETY: `tcp_info` is plain data; the kernel writes at most `len` bytes into it.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut info as *mut libc::tcp_info).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some((info.tcpi_last_data_sent, info.tcpi_last_data_recv))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn socket_links_parse() {
            assert_eq!(socket_inode("socket:[4242]"), Some(4242));
            assert_eq!(socket_inode("pipe:[4242]"), None);
            assert_eq!(socket_inode("/dev/null"), None);
        }
    }
}
