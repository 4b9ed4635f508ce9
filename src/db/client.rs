//! Pooled connections that prepare each statement once.
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
use postgres::{Client, Row, SimpleQueryMessage, SimpleQueryRow, Statement};
use std::collections::{HashMap, HashSet};
use std::time::Instant;

/// Statements kept per connection at most; past it the cache starts over (the worker runs a
/// fixed set of statements, far fewer, so this only bounds a caller that builds SQL text).
const CAPACITY: usize = 256;

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// The rows of each statement of a message sent together (`begin_with`, `commit_with`), in
/// order.
pub type Rows = Vec<Vec<SimpleQueryRow>>;

/// The statements one connection has prepared, by SQL text.
#[derive(Default)]
pub struct Statements {
    by_sql: HashMap<String, Statement>,
    /// The names of the `Named` statements this connection has prepared.
    named: HashSet<&'static str>,
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

    /// Forgets the `Named` statements when the server no longer accepts one of them (`stale`):
    /// each is deallocated, if the server still has it, and prepared again on its next use.
    fn forget_named_if_stale(&mut self, client: &mut Client, e: &postgres::Error) {
        if stale(e) {
            for name in self.named.drain() {
                let _ = client.batch_execute(&format!("DEALLOCATE {name}"));
            }
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
    /// Dropped by `Drop for Conn` alone, while the watchdog watches the goodbye.
    client: std::mem::ManuallyDrop<Client>,
    statements: Statements,
    pub(super) returned: Instant,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Closing says goodbye and waits for the server to close: a wait the watchdog bounds
        // (W5), as it does for a checked-out connection.
        let _closing = super::waiting();
        // SAFETY: the client is dropped here only, once, and never used after.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.client) }
    }
}

impl Conn {
    pub fn new(client: Client) -> Conn {
        Conn {
            client: std::mem::ManuallyDrop::new(client),
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
        self.client.batch_execute("BEGIN")?;
        Ok(Tx::open(&mut self.client, &mut self.statements))
    }

    /// Starts a transaction with `statements` in the same message (each prepared on this
    /// connection first, once); the transaction, and the rows each statement returned. When a
    /// statement fails, the transaction is rolled back and the error returned.
    pub fn begin_with(
        &mut self,
        statements: &[Execute<'_>],
    ) -> Result<(Tx<'_>, Rows), postgres::Error> {
        prepare_named(&mut self.client, &mut self.statements, statements)?;
        let mut text = String::from("BEGIN;\n");
        for statement in statements {
            statement.write(&mut text);
        }
        match self.client.simple_query(&text) {
            // BEGIN's own command tag comes first.
            Ok(messages) => {
                let mut rows = split_results(messages, statements.len() + 1);
                rows.remove(0);
                Ok((Tx::open(&mut self.client, &mut self.statements), rows))
            }
            Err(e) => {
                let _ = self.client.batch_execute("ROLLBACK");
                self.statements.forget_named_if_stale(&mut self.client, &e);
                Err(e)
            }
        }
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
///
/// It is kept on the connection itself (`BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT`, as
/// `postgres::Transaction` sends them) rather than in a `postgres::Transaction`, because that
/// type cannot begin with a statement in the same message, nor commit with one: a publication
/// sends `BEGIN` with its first statement and `COMMIT` after its last ones, two round trips
/// where a statement each took five (`begin_with`, `commit_with`). Dropped
/// unfinished, it rolls back, as `postgres::Transaction` does.
pub struct Tx<'a> {
    client: &'a mut Client,
    statements: &'a mut Statements,
    /// A nested transaction's savepoint; `None` for the transaction itself.
    savepoint: Option<String>,
    depth: u32,
    done: bool,
}

impl<'a> Tx<'a> {
    fn open(client: &'a mut Client, statements: &'a mut Statements) -> Tx<'a> {
        Tx {
            client,
            statements,
            savepoint: None,
            depth: 0,
            done: false,
        }
    }

    pub fn commit(mut self) -> Result<(), postgres::Error> {
        self.done = true;
        match &self.savepoint {
            Some(name) => self.client.batch_execute(&format!("RELEASE {name}")),
            None => self.client.batch_execute("COMMIT"),
        }
    }

    pub fn rollback(mut self) -> Result<(), postgres::Error> {
        self.done = true;
        self.roll_back()
    }

    fn roll_back(&mut self) -> Result<(), postgres::Error> {
        match &self.savepoint {
            Some(name) => self.client.batch_execute(&format!("ROLLBACK TO {name}")),
            None => self.client.batch_execute("ROLLBACK"),
        }
    }

    /// A nested transaction (a savepoint) sharing the cache.
    pub fn transaction(&mut self) -> Result<Tx<'_>, postgres::Error> {
        let depth = self.depth + 1;
        self.nested(format!("sp_{depth}"), depth)
    }

    /// A named savepoint sharing the cache.
    pub fn savepoint(&mut self, name: &str) -> Result<Tx<'_>, postgres::Error> {
        let depth = self.depth + 1;
        self.nested(name.to_owned(), depth)
    }

    fn nested(&mut self, name: String, depth: u32) -> Result<Tx<'_>, postgres::Error> {
        self.client.batch_execute(&format!("SAVEPOINT {name}"))?;
        Ok(Tx {
            client: &mut *self.client,
            statements: &mut *self.statements,
            savepoint: Some(name),
            depth,
            done: false,
        })
    }

    /// Runs `statements` (each prepared on this connection first, once), then commits, in
    /// one message; the rows each statement returned, in order. When any of them fails (or
    /// the commit does), nothing of the transaction is committed: it is rolled back unless
    /// the failure was the commit's own.
    pub fn commit_with(mut self, statements: &[Execute<'_>]) -> Result<Rows, postgres::Error> {
        assert!(self.savepoint.is_none(), "commit_with ends a transaction");
        self.done = true;
        let sent = prepare_named(self.client, self.statements, statements).and_then(|()| {
            let mut text = String::new();
            for statement in statements {
                statement.write(&mut text);
            }
            text.push_str("COMMIT");
            self.client.simple_query(&text)
        });
        match sent {
            Ok(messages) => Ok(split_results(messages, statements.len())),
            Err(e) => {
                // Past a failed statement the server skipped the rest, the commit included:
                // the transaction is still open, aborted. After a failed commit this only
                // warns. A connection that is gone takes the transaction with it.
                let _ = self.client.batch_execute("ROLLBACK");
                self.statements.forget_named_if_stale(self.client, &e);
                Err(e)
            }
        }
    }

    /// Runs `run` with the cached statement for `sql`; a stale one is forgotten (the
    /// transaction has failed, so it is not retried here).
    fn cached<T>(
        &mut self,
        sql: &str,
        run: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let client = &mut *self.client;
        let statement = self.statements.get(sql, |q| client.prepare(q))?;
        run(client, &statement).inspect_err(|e| self.statements.forget_if_stale(sql, e))
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.roll_back();
        }
    }
}

/// A statement prepared with SQL's `PREPARE` under a fixed name, so that it can be run by
/// `EXECUTE` in a message together with others (`Conn::begin_with`, `Tx::commit_with`).
pub struct Named {
    pub name: &'static str,
    pub sql: &'static str,
}

/// One `EXECUTE` of a `Named` statement with its arguments, each an SQL literal
/// (`db::literal`).
pub struct Execute<'a> {
    pub statement: &'a Named,
    pub args: Vec<String>,
}

impl Execute<'_> {
    fn write(&self, text: &mut String) {
        text.push_str("EXECUTE ");
        text.push_str(self.statement.name);
        text.push('(');
        text.push_str(&self.args.join(", "));
        text.push_str(");\n");
    }
}

/// Prepares, each in a message of its own, the statements of `statements` this connection has
/// not prepared yet. `PREPARE` is not undone by a rollback, so what is recorded here is what
/// the server holds.
fn prepare_named(
    client: &mut Client,
    cache: &mut Statements,
    statements: &[Execute<'_>],
) -> Result<(), postgres::Error> {
    for e in statements {
        let named = e.statement;
        if cache.named.contains(named.name) {
            continue;
        }
        match client.batch_execute(&format!("PREPARE {} AS {}", named.name, named.sql)) {
            Ok(()) => {}
            // Prepared before this cache knew of it (a cache that forgot it as stale).
            Err(e) if e.code().map(|c| c.code()) == Some("42P05") => {}
            Err(e) => return Err(e),
        }
        cache.named.insert(named.name);
    }
    Ok(())
}

/// Each statement's rows out of a multi-statement message's answer, in order: every statement
/// ends with its command tag.
fn split_results(messages: Vec<SimpleQueryMessage>, statements: usize) -> Rows {
    let mut out: Rows = (0..statements).map(|_| Vec::new()).collect();
    let mut at = 0;
    for message in messages {
        match message {
            SimpleQueryMessage::Row(row) => {
                if let Some(rows) = out.get_mut(at) {
                    rows.push(row);
                }
            }
            SimpleQueryMessage::CommandComplete(_) => at += 1,
            _ => {}
        }
    }
    out
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
        self.client.batch_execute(sql)
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
