//! Database connections: the pool every thread borrows from, and dedicated connections for
//! LISTEN and migrations.
//!
//! Owns connect timeouts, statement timeouts and TCP keepalive (SPEC W5), so a silent
//! connection never wedges a thread for longer than the configured database timeout. It writes
//! no SQL of its own beyond session settings.

use postgres::{Client, NoTls};
use r2d2_postgres::PostgresConnectionManager;
use std::fmt;
use std::time::Duration;

pub type Pool = r2d2::Pool<PostgresConnectionManager<NoTls>>;
pub type PooledClient = r2d2::PooledConnection<PostgresConnectionManager<NoTls>>;

/// Why the database could not be reached or used.
#[derive(Debug)]
pub enum DbError {
    /// The connection string does not parse.
    InvalidUrl(postgres::Error),
    /// No connection could be made or borrowed within the timeout.
    Unavailable(String),
    /// A statement failed.
    Query(postgres::Error),
}

impl DbError {
    /// Transient errors end the pass without publishing; the worker recovers by itself.
    pub fn is_transient(&self) -> bool {
        match self {
            DbError::InvalidUrl(_) => false,
            DbError::Unavailable(_) => true,
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
            DbError::InvalidUrl(e) => write!(f, "invalid database URL: {e}"),
            DbError::Unavailable(m) => write!(f, "database unavailable: {m}"),
            DbError::Query(e) => match e.as_db_error() {
                Some(db) => write!(f, "database error {}: {}", db.code().code(), db.message()),
                None => write!(f, "database error: {e}"),
            },
        }
    }
}

impl std::error::Error for DbError {}

impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> DbError {
        DbError::Query(e)
    }
}

impl From<r2d2::Error> for DbError {
    fn from(e: r2d2::Error) -> DbError {
        DbError::Unavailable(e.to_string())
    }
}

/// Parses `url` and applies the worker's session settings: connect timeout, keepalive, and a
/// statement timeout so no query waits longer than `timeout`.
pub fn config(url: &str, timeout: Duration) -> Result<postgres::Config, DbError> {
    let mut config: postgres::Config = url.parse().map_err(DbError::InvalidUrl)?;
    let ms = timeout.as_millis().max(1);
    config
        .connect_timeout(timeout)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(5))
        .keepalives_interval(Duration::from_secs(2))
        .keepalives_retries(3)
        .application_name("occ-worker")
        .options(&format!(
            "-c statement_timeout={ms} -c lock_timeout={ms} -c idle_in_transaction_session_timeout={}",
            ms * 6
        ));
    Ok(config)
}

/// A pool of `size` connections; borrowing waits at most `timeout`.
pub fn pool(url: &str, timeout: Duration, size: u32) -> Result<Pool, DbError> {
    let manager = PostgresConnectionManager::new(config(url, timeout)?, NoTls);
    r2d2::Pool::builder()
        .max_size(size)
        .min_idle(Some(1))
        .connection_timeout(timeout)
        .build(manager)
        .map_err(DbError::from)
}

/// A dedicated connection (LISTEN, migrations, operator commands).
pub fn connect(url: &str, timeout: Duration) -> Result<Client, DbError> {
    config(url, timeout)?
        .connect(NoTls)
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
