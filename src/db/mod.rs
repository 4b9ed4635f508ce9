//! Database connections: the pool every thread borrows from, and dedicated connections for
//! LISTEN and migrations.
//!
//! Owns connect timeouts, statement timeouts, TCP keepalive and `tcp_user_timeout`, the pool's
//! check-out test (bounded by the database timeout), and the `Watchdog` that bounds every wait
//! on the client side (SPEC W5): a server that stops answering while its sockets stay open
//! never wedges a thread for longer than the database timeout plus one watchdog tick. It writes
//! no SQL of its own beyond session settings.

mod client;
pub mod literal;
pub mod tls;
mod watchdog;

pub use client::{Conn, Execute, GenericClient, Named, Statements, Tx};
pub use watchdog::{waiting, Waiting, Watchdog};

use postgres::Client;
use std::fmt;
use std::time::Duration;

pub type Pool = r2d2::Pool<Manager>;
pub type PooledClient = r2d2::PooledConnection<Manager>;

/// The pool's connection manager: connects with the worker's session settings and tests a
/// connection at check-out without a round trip: it reads what the socket already holds, so a
/// connection the server closed or the `Watchdog` shut down is seen closed and replaced (the
/// `has_broken` test at check-in catches one that failed in use). Only a connection idle for
/// half the database timeout or longer (`IDLE_PING_DIVISOR`), which the watchdog may shut down
/// as unanswered at any moment (see `watchdog`), is also asked a no-op query bounded by the
/// database timeout (r2d2_postgres' own test waits without bound), which renews it. r2d2
/// tests idle connections one after another until one passes, and drops each that fails (a
/// drop says goodbye and waits for the server to close): so once a ping has failed the
/// database is *suspect* for one timeout, during which pings wait only `SUSPECT_WAIT` and the
/// `Watchdog` ends unanswered requests after that long too. One check-out never adds up many
/// timeouts.
pub struct Manager {
    config: postgres::Config,
    tls: tls::Connector,
    timeout: Duration,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// How long a request may stay unanswered while the database is suspect.
pub const SUSPECT_WAIT: Duration = Duration::from_millis(100);

/// Milliseconds since `EPOCH` until which the database is suspect; `u64::MAX` once closing.
static SUSPECT_UNTIL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

fn now_ms() -> u64 {
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// Marks the database suspect for `period`: check-out tests and the watchdog wait only
/// `SUSPECT_WAIT` for an answer.
pub fn suspect_for(period: Duration) {
    let until = now_ms().saturating_add(period.as_millis() as u64);
    SUSPECT_UNTIL.fetch_max(until, std::sync::atomic::Ordering::SeqCst);
    watchdog::deadlines_changed();
}

/// From now on the process only closes connections: closing one never waits longer than
/// `SUSPECT_WAIT` for a silent server (shutdown during a stall, SPEC W4/W5).
pub fn closing() {
    SUSPECT_UNTIL.store(u64::MAX, std::sync::atomic::Ordering::SeqCst);
    watchdog::deadlines_changed();
}

/// Whether the database is suspect (a check-out test went unanswered recently).
pub fn is_suspect() -> bool {
    now_ms() < SUSPECT_UNTIL.load(std::sync::atomic::Ordering::SeqCst)
}

/// The part of the database timeout a pooled connection may stay idle and still be handed
/// out without a ping: the watchdog shuts an idle connection down only after at least three
/// quarters of the timeout (the timeout less one tick of at most a quarter), so one idle for
/// less than half of it is never shut down between its check-out and its first statement.
const IDLE_PING_DIVISOR: u32 = 2;

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Conn, postgres::Error> {
        let _opening = waiting();
        Ok(Conn::new(self.config.connect(self.tls.clone())?))
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), postgres::Error> {
        // No round trip: drain what the socket holds; an end-of-file or a reset fails here and
        // marks the client closed.
        let client = conn.client();
        if let Some(e) =
            postgres::fallible_iterator::FallibleIterator::next(&mut client.notifications().iter())
                .err()
        {
            return Err(e);
        }
        if client.is_closed() {
            // Fails at once with the closed-connection error, sending nothing.
            return client.batch_execute("");
        }
        if conn.returned.elapsed() < self.timeout / IDLE_PING_DIVISOR {
            return Ok(());
        }
        let client = conn.client();
        let bound = if is_suspect() {
            SUSPECT_WAIT.min(self.timeout)
        } else {
            self.timeout
        };
        let asked = std::time::Instant::now();
        let answer = client.is_valid(bound);
        // Only silence makes the database suspect; a connection found closed (a restart, or
        // one the watchdog shut down while idle) fails at once and says nothing about it.
        if answer.is_err() && asked.elapsed() >= SUSPECT_WAIT.min(bound) {
            suspect_for(self.timeout);
        }
        answer
    }

    /// Called when a connection is returned: it is dropped if closed, else its idle time
    /// starts now.
    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.returned = std::time::Instant::now();
        conn.client().is_closed()
    }
}

/// Why the database could not be reached or used.
#[derive(Debug)]
pub enum DbError {
    /// The connection string does not parse.
    InvalidUrl(postgres::Error),
    /// The connection string's TLS settings (`sslmode`, `sslrootcert`) are unusable.
    InvalidTls(String),
    /// No connection could be made within the timeout, described without the server's free
    /// text (its SQLSTATE at most), or the database could not be reached for `what`.
    Unavailable(String),
    /// The pool could not lend a connection within the timeout.
    Pool(r2d2::Error),
    /// A thread the database client needs could not be started.
    Thread(std::io::Error),
    /// A statement failed.
    Query(postgres::Error),
    /// A row the worker reads does not hold what the schema promises (a NULL or unparsable
    /// column, an unknown enum value): corruption, never transient and never "unavailable".
    Corrupt(String),
}

impl DbError {
    /// Transient errors end the pass without publishing; the worker recovers by itself.
    pub fn is_transient(&self) -> bool {
        match self {
            DbError::InvalidUrl(_) | DbError::InvalidTls(_) | DbError::Corrupt(_) => false,
            DbError::Unavailable(_) | DbError::Pool(_) | DbError::Thread(_) => true,
            DbError::Query(e) => e.as_db_error().is_none() || e.is_closed(),
        }
    }

    /// The SQLSTATE of a database error, if any.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            DbError::Query(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbError::InvalidUrl(_) => write!(f, "invalid database URL"),
            DbError::InvalidTls(m) => write!(f, "invalid database TLS settings: {m}"),
            DbError::Unavailable(m) => write!(f, "database unavailable: {m}"),
            DbError::Pool(_) => write!(f, "database unavailable"),
            DbError::Thread(_) => write!(f, "database unavailable: cannot start a thread"),
            // The server's own message is the source (`error_chain` prints it).
            DbError::Query(e) => match e.as_db_error() {
                Some(db) => write!(f, "database error {}", db.code().code()),
                None => write!(f, "database connection failed"),
            },
            DbError::Corrupt(what) => write!(f, "corrupt data: {what}"),
        }
    }
}

impl std::error::Error for DbError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DbError::InvalidUrl(e) => Some(e),
            DbError::Query(e) => match e.as_db_error() {
                Some(db) => Some(db),
                None => Some(e),
            },
            DbError::Pool(e) => Some(e),
            DbError::Thread(e) => Some(e),
            DbError::InvalidTls(_) | DbError::Unavailable(_) | DbError::Corrupt(_) => None,
        }
    }
}

/// An error and its sources on one line, outermost first, joined by `: `; a source whose
/// text its wrapper already shows is not repeated, and line breaks become spaces.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut next = e.source();
    while let Some(source) = next {
        let text = source.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = source.source();
    }
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> DbError {
        DbError::Query(e)
    }
}

impl From<r2d2::Error> for DbError {
    fn from(e: r2d2::Error) -> DbError {
        DbError::Pool(e)
    }
}

/// How the worker's sessions plan its statements, as `options` of a connection (`config`; the
/// benchmark runs the worker's statements under pgbench with them too).
///
/// Prepared statements keep one generic plan (`plan_cache_mode`): the
/// worker's statements look rows up by key, id arrays and lane rows, whose best plan does not
/// depend on the values bound, while PostgreSQL's default planned many of them again on every
/// execution (its custom plans for array parameters cost about as much as the generic one).
/// Measured on the drain at 16 threads: +10 % works/s, -10 % CPU per work (`scripts/bench-queue`;
/// the runs are in the git history of docs/benchmarks.md).
///
/// They are planned as for a working set in memory (`random_page_cost` 1.1, PostgreSQL's
/// advice for a cached database; its default of 4 prices each index probe as four pages read
/// in order). With the default, a statement over the 16 lanes of a publication scanned the
/// whole lane table whenever it had fewer than a few thousand rows, and the lock of the lane
/// trigger compared every row with each lane named: three scans per publication, most of the
/// gap between the drain and PostgreSQL's own cycle (the runs are in the git history of
/// docs/benchmarks.md).
pub const PLANNER_OPTIONS: &str = "-c plan_cache_mode=force_generic_plan -c random_page_cost=1.1";

/// Parses `url` (its TLS settings apart, `tls`) and applies the worker's session settings:
/// connect timeout, keepalive, `tcp_user_timeout` (unacknowledged data fails the connection),
/// server-side statement and lock timeouts, the planner settings (`PLANNER_OPTIONS`), and the
/// `sslmode` to negotiate. A peer whose kernel acknowledges but never answers is the
/// `Watchdog`'s.
pub fn config(url: &str, timeout: Duration) -> Result<(postgres::Config, tls::Connector), DbError> {
    let (rest, settings) = tls::split(url).map_err(DbError::InvalidTls)?;
    let connector = tls::connector(&settings).map_err(DbError::InvalidTls)?;
    let mut config: postgres::Config = rest.parse().map_err(DbError::InvalidUrl)?;
    let ms = timeout.as_millis().max(1);
    config
        .ssl_mode(settings.mode.wire())
        .connect_timeout(timeout)
        .tcp_user_timeout(timeout)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(5))
        .keepalives_interval(Duration::from_secs(2))
        .keepalives_retries(3)
        .application_name("occ-worker")
        .options(&format!(
            "-c statement_timeout={ms} -c lock_timeout={ms} -c idle_in_transaction_session_timeout={} \
             {PLANNER_OPTIONS}",
            ms * 6
        ));
    Ok((config, connector))
}

/// A pool of `size` connections; borrowing waits at most `timeout`.
pub fn pool(url: &str, timeout: Duration, size: u32) -> Result<Pool, DbError> {
    let (config, tls) = config(url, timeout)?;
    let manager = Manager {
        config,
        tls,
        timeout,
    };
    r2d2::Pool::builder()
        .max_size(size)
        .min_idle(Some(1))
        .connection_timeout(timeout)
        // A checked-out connection is a wait the watchdog bounds (W5).
        .event_handler(Box::new(watchdog::PoolEvents))
        .build(manager)
        .map_err(DbError::from)
}

/// A dedicated connection (LISTEN, migrations, operator commands).
pub fn connect(url: &str, timeout: Duration) -> Result<Client, DbError> {
    let (config, tls) = config(url, timeout)?;
    let _opening = waiting();
    config
        .connect(tls)
        .map_err(|e| DbError::Unavailable(short(&e)))
}

/// A one-line description of a connection failure without the server's free text.
fn short(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("SQLSTATE {}", db.code().code()),
        None => e.to_string(),
    }
}

/// `host:port` of the first server `config` names (a Unix socket directory as its path).
pub fn server(config: &postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// `user@host:port/database`: where `config` connects, without the password, for messages.
pub fn describe(config: &postgres::Config) -> String {
    let user = config.get_user().unwrap_or("?");
    let dbname = config.get_dbname().unwrap_or(user);
    format!("{user}@{}/{dbname}", server(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corruption_is_its_own_permanent_kind() {
        let e = DbError::Corrupt("column 3 of a claim is NULL".into());
        assert!(!e.is_transient());
        assert_eq!(e.to_string(), "corrupt data: column 3 of a claim is NULL");
        assert!(std::error::Error::source(&e).is_none());
    }

    #[test]
    fn a_pool_or_thread_failure_keeps_its_cause_as_the_source() {
        // ARCHITECTURE's invariant: an error that wraps another returns it from `source()`.
        // Nothing listens on port 1 of the loopback: the pool's first connection is refused.
        let e = pool(
            "postgresql://nobody@127.0.0.1:1/none",
            Duration::from_millis(200),
            1,
        )
        .map(drop)
        .unwrap_err();
        assert!(matches!(e, DbError::Pool(_)), "{e:?}");
        assert!(e.is_transient());
        let source = std::error::Error::source(&e).expect("the pool's error");
        assert!(error_chain(&e).starts_with("database unavailable: "), "{e}");
        assert!(!source.to_string().is_empty());
        let e = DbError::Thread(std::io::Error::other("no threads left"));
        assert_eq!(
            error_chain(&e),
            "database unavailable: cannot start a thread: no threads left"
        );
    }

    #[test]
    fn an_error_chain_is_one_line_without_repeats() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("cannot read the settings")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "no such\nfile");
        assert_eq!(
            error_chain(&Outer(inner)),
            "cannot read the settings: no such file"
        );
        // A wrapper that already shows its source's text does not repeat it.
        #[derive(Debug)]
        struct Shows(std::io::Error);
        impl fmt::Display for Shows {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "read failed: {}", self.0)
            }
        }
        impl std::error::Error for Shows {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let inner = std::io::Error::other("disk gone");
        assert_eq!(error_chain(&Shows(inner)), "read failed: disk gone");
    }
}
