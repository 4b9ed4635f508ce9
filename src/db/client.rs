//! Pooled connections that prepare each statement once (issue 10, item 5).
//!
//! `Conn` is what the pool hands out: a `postgres::Client` with its own statement cache, keyed
//! by SQL text. `postgres` prepares a `&str` query on every call (a Parse/Describe round trip
//! before the Bind/Execute one); through `Conn` and its transactions (`Tx`) a statement is
//! parsed once per connection and every later call is one round trip. `GenericClient` is the
//! statement interface every module that runs SQL takes, implemented by `Conn` and `Tx`
//! (cached) and by plain `postgres::Client` and `postgres::Transaction` (dedicated
//! connections: listener, migrations, operator commands, tests), so one function serves both.
//! It never rewrites SQL and never retries a statement that could have had an effect.

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};
use std::collections::HashMap;
use std::time::Instant;

/// Statements kept per connection at most; past it the cache starts over (the worker runs a
/// fixed set of statements, far fewer, so this only bounds a caller that builds SQL text).
const CAPACITY: usize = 256;

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// The statements one connection has prepared, by SQL text.
#[derive(Default)]
pub struct Statements {
    by_sql: HashMap<String, Statement>,
}

impl Statements {
    fn get(
        &mut self,
        sql: &str,
        prepare: impl FnOnce(&str) -> Result<Statement, postgres::Error>,
    ) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.by_sql.get(sql) {
            return Ok(statement.clone());
        }
        let statement = prepare(sql)?;
        if self.by_sql.len() >= CAPACITY {
            self.by_sql.clear();
        }
        self.by_sql.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Forgets `sql` when the server no longer accepts its prepared form: its result type
    /// changed under it (a migration, `0A000`) or it is gone (`26000`). The next call prepares
    /// it again.
    fn forget_if_stale(&mut self, sql: &str, e: &postgres::Error) {
        if stale(e) {
            self.by_sql.remove(sql);
        }
    }

    /// How many statements are prepared.
    pub fn len(&self) -> usize {
        self.by_sql.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_sql.is_empty()
    }
}

/// Whether `e` says a prepared statement is out of date or unknown to the server.
fn stale(e: &postgres::Error) -> bool {
    matches!(e.code().map(|c| c.code()), Some("0A000") | Some("26000"))
}

/// A pooled connection: the client, its prepared statements, and when it was last returned to
/// the pool (the check-out test asks the server only after a long idle time, see `Manager`).
pub struct Conn {
    client: Client,
    statements: Statements,
    pub(super) returned: Instant,
}

impl Conn {
    pub fn new(client: Client) -> Conn {
        Conn {
            client,
            statements: Statements::default(),
            returned: Instant::now(),
        }
    }

    /// The underlying client (prepares nothing by itself).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// The statements this connection has prepared.
    pub fn statements(&self) -> &Statements {
        &self.statements
    }

    /// Starts a transaction whose statements use this connection's cache.
    pub fn transaction(&mut self) -> Result<Tx<'_>, postgres::Error> {
        Ok(Tx {
            tx: self.client.transaction()?,
            statements: &mut self.statements,
        })
    }

    /// Runs `run` with the cached statement for `sql`. Outside a transaction a statement the
    /// server refuses as stale failed before it ran, so it is prepared again and run once more.
    fn cached<T>(
        &mut self,
        sql: &str,
        mut run: impl FnMut(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let client = &mut self.client;
        let statement = self.statements.get(sql, |q| client.prepare(q))?;
        match run(client, &statement) {
            Err(e) if stale(&e) => {
                self.statements.forget_if_stale(sql, &e);
                let statement = self.statements.get(sql, |q| client.prepare(q))?;
                run(client, &statement)
            }
            other => other,
        }
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// A transaction on a pooled connection, using the connection's statement cache.
pub struct Tx<'a> {
    tx: postgres::Transaction<'a>,
    statements: &'a mut Statements,
}

impl<'a> Tx<'a> {
    pub fn commit(self) -> Result<(), postgres::Error> {
        self.tx.commit()
    }

    pub fn rollback(self) -> Result<(), postgres::Error> {
        self.tx.rollback()
    }

    /// A nested transaction (a savepoint) sharing the cache.
    pub fn transaction(&mut self) -> Result<Tx<'_>, postgres::Error> {
        Ok(Tx {
            tx: self.tx.transaction()?,
            statements: &mut *self.statements,
        })
    }

    /// A named savepoint sharing the cache.
    pub fn savepoint(&mut self, name: &str) -> Result<Tx<'_>, postgres::Error> {
        Ok(Tx {
            tx: self.tx.savepoint(name)?,
            statements: &mut *self.statements,
        })
    }

    /// Runs `run` with the cached statement for `sql`; a stale one is forgotten (the
    /// transaction has failed, so it is not retried here).
    fn cached<T>(
        &mut self,
        sql: &str,
        run: impl FnOnce(&mut postgres::Transaction<'a>, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let tx = &mut self.tx;
        let statement = self.statements.get(sql, |q| tx.prepare(q))?;
        run(tx, &statement).inspect_err(|e| self.statements.forget_if_stale(sql, e))
    }
}

impl<'a> std::ops::Deref for Tx<'a> {
    type Target = postgres::Transaction<'a>;
    fn deref(&self) -> &postgres::Transaction<'a> {
        &self.tx
    }
}

impl<'a> std::ops::DerefMut for Tx<'a> {
    fn deref_mut(&mut self) -> &mut postgres::Transaction<'a> {
        &mut self.tx
    }
}

/// The statements every module runs, on a pooled connection, a transaction, or a dedicated
/// client. Named and shaped like `postgres::GenericClient` (which cannot be implemented
/// outside its crate), with SQL text as the statement.
pub trait GenericClient {
    fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, postgres::Error>;
    fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, postgres::Error>;
    fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, postgres::Error>;
    fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, postgres::Error>;
    /// Simple-protocol statements (no parameters, nothing prepared).
    fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error>;
}

/// The cached statement methods, inherent so that they win over `Client`'s and
/// `Transaction`'s own (which prepare every time) whether or not the trait is in scope.
macro_rules! cached_methods {
    () => {
        pub fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, postgres::Error> {
            self.cached(sql, |c, s| c.execute(s, params))
        }

        pub fn query(
            &mut self,
            sql: &str,
            params: Params<'_>,
        ) -> Result<Vec<Row>, postgres::Error> {
            self.cached(sql, |c, s| c.query(s, params))
        }

        pub fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, postgres::Error> {
            self.cached(sql, |c, s| c.query_one(s, params))
        }

        pub fn query_opt(
            &mut self,
            sql: &str,
            params: Params<'_>,
        ) -> Result<Option<Row>, postgres::Error> {
            self.cached(sql, |c, s| c.query_opt(s, params))
        }
    };
}

impl Conn {
    cached_methods!();
}

impl Tx<'_> {
    cached_methods!();
}

impl GenericClient for Conn {
    fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, postgres::Error> {
        Conn::execute(self, sql, params)
    }
    fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, postgres::Error> {
        Conn::query(self, sql, params)
    }
    fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, postgres::Error> {
        Conn::query_one(self, sql, params)
    }
    fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, postgres::Error> {
        Conn::query_opt(self, sql, params)
    }
    fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.client.batch_execute(sql)
    }
}

impl GenericClient for Tx<'_> {
    fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, postgres::Error> {
        Tx::execute(self, sql, params)
    }
    fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, postgres::Error> {
        Tx::query(self, sql, params)
    }
    fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, postgres::Error> {
        Tx::query_one(self, sql, params)
    }
    fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, postgres::Error> {
        Tx::query_opt(self, sql, params)
    }
    fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.tx.batch_execute(sql)
    }
}

/// Dedicated connections and their transactions run statements as `postgres` does, unprepared.
macro_rules! uncached {
    ($($t:ty),*) => {$(
        impl GenericClient for $t {
            fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, postgres::Error> {
                postgres::GenericClient::execute(self, sql, params)
            }
            fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, postgres::Error> {
                postgres::GenericClient::query(self, sql, params)
            }
            fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, postgres::Error> {
                postgres::GenericClient::query_one(self, sql, params)
            }
            fn query_opt(
                &mut self,
                sql: &str,
                params: Params<'_>,
            ) -> Result<Option<Row>, postgres::Error> {
                postgres::GenericClient::query_opt(self, sql, params)
            }
            fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
                postgres::GenericClient::batch_execute(self, sql)
            }
        }
    )*};
}

uncached!(Client, postgres::Transaction<'_>);
