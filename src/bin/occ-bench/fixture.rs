//! What every measurement stands on: a fresh database per measurement (`BenchDb`), the
//! worker's context and options as `occ-worker run` builds them, the rows the measurements
//! fill the queue with, and a Compute Driver that refuses every call (`Unused`). Nothing here
//! measures anything.

use crate::BenchError;
use occ_worker::cancel::CancelToken;
use occ_worker::compute::{
    AgentSpec, ComputeDriver, ComputeError, DriverPolicy, NamespaceObservation, NamespaceSpec,
    PreflightWarning, RevisionObservation, RevisionSpec,
};
use occ_worker::events::Events;
use occ_worker::metrics::Metrics;
use occ_worker::queue::{self, QueueOptions};
use occ_worker::reconcile::{Context, DynReconciler, Registry};
use occ_worker::runtime::RuntimeOptions;
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The database timeout of every connection the benchmark opens.
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// The lease of every claim the benchmark makes.
pub const LEASE: Duration = Duration::from_secs(30);

/// A database failure with the step it happened in.
pub fn step(what: &'static str) -> impl Fn(postgres::Error) -> BenchError {
    move |e| {
        let message = match e.as_db_error() {
            Some(db) => db.message().to_string(),
            None => e.to_string(),
        };
        BenchError::new(format!("bench {what}: {message}"))
    }
}

/// A fresh, migrated, bootstrapped database; dropped with this value.
pub struct BenchDb {
    admin: String,
    name: String,
    pub url: String,
}

impl BenchDb {
    /// `occ_bench_<pid>_<tag>`, created through the `admin` URL.
    pub fn create(admin: &str, tag: &str) -> Result<BenchDb, BenchError> {
        let name = format!("occ_bench_{}_{tag}", std::process::id());
        let mut client = occ_worker::db::connect(admin, TIMEOUT)?;
        client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .map_err(step("create database"))?;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(step("create database"))?;
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(admin);
        let db = BenchDb {
            admin: admin.to_string(),
            url: format!("{base}/{name}"),
            name,
        };
        let mut c = db.client()?;
        occ_worker::migrate::run(&mut c)?;
        c.execute("SELECT occ.bootstrap('bench', 'admin')", &[])
            .map_err(step("bootstrap"))?;
        Ok(db)
    }

    /// A dedicated connection with the worker's session settings (`db::connect`).
    pub fn client(&self) -> Result<Client, BenchError> {
        Ok(occ_worker::db::connect(&self.url, TIMEOUT)?)
    }
}

impl Drop for BenchDb {
    fn drop(&mut self) {
        if let Ok(mut c) = occ_worker::db::connect(&self.admin, TIMEOUT) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// The context of a worker on `url` with `concurrency` threads, its pool sized as
/// `occ-worker run` sizes it (docs/operating.md, "Connection budget").
pub fn context(url: &str, concurrency: usize) -> Result<Arc<Context>, BenchError> {
    context_with(url, concurrency, Arc::new(Unused))
}

/// `context` with `compute` as its Compute Driver.
pub fn context_with(
    url: &str,
    concurrency: usize,
    compute: Arc<dyn ComputeDriver>,
) -> Result<Arc<Context>, BenchError> {
    Ok(Arc::new(Context {
        pool: occ_worker::db::pool(
            url,
            TIMEOUT,
            occ_worker::runtime::budget::ConnectionBudget::new(concurrency).pool_size(),
        )?,
        compute,
        installation_id: "bench".into(),
        queue: QueueOptions::new(LEASE, 5),
        convergence_timeout: Duration::from_secs(900),
        events: Events::discard(),
        metrics: Metrics::new(),
        sandbox: Default::default(),
        credential_gateway: None,
        mode: occ_worker::config::Mode::Development,
        repository_sender: None,
    }))
}

/// A worker's options: `concurrency` threads, the poll at 250 ms, LISTEN on `url`.
pub fn options(url: &str, concurrency: usize) -> RuntimeOptions {
    RuntimeOptions {
        concurrency,
        poll_interval: Duration::from_millis(250),
        shutdown_grace: Duration::from_secs(10),
        listen_url: Some(url.to_string()),
        db_timeout: TIMEOUT,
    }
}

/// `reconciler` for every operation.
pub fn registry(reconciler: Arc<dyn DynReconciler>) -> Registry {
    queue::Operation::ALL
        .into_iter()
        .fold(Registry::new(), |r, op| r.with(op, reconciler.clone()))
}

/// The one number `sql` answers.
pub fn count(c: &mut Client, sql: &str) -> Result<i64, BenchError> {
    Ok(c.query_one(sql, &[])?.get(0))
}

/// The cluster's WAL insert position in bytes (`pg_current_wal_insert_lsn`): the difference of
/// two is the WAL every database of the cluster wrote between them, full-page images included.
/// Unlike `pg_stat_wal`, which a busy session reports at most once a second, it is exact at
/// once.
pub fn wal_position(c: &mut Client) -> Result<i64, BenchError> {
    count(
        c,
        "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint",
    )
}

/// WAL bytes per work between two `wal_position`s; `None` for no work.
pub fn wal_per_work(before: i64, after: i64, works: i64) -> Option<f64> {
    (works > 0).then(|| ((after - before) as f64 / works as f64).round())
}

/// Runs `sql(lo, hi)` for `i` in `0..total`, 10,000 at a time, each chunk its own
/// transaction (a statement stays well within the statement timeout).
pub fn fill_chunks(
    c: &mut Client,
    total: i64,
    what: &'static str,
    sql: impl Fn(i64, i64) -> String,
) -> Result<(), BenchError> {
    let mut lo = 0;
    while lo < total {
        let hi = (lo + 10_000).min(total) - 1;
        c.batch_execute(&sql(lo, hi)).map_err(step(what))?;
        lo = hi + 1;
    }
    Ok(())
}

/// Due now: the works' own default.
pub const NOW: &str = "clock_timestamp()";

/// The statement inserting Namespace deletions number `lo..=hi`, spread over the Namespaces
/// `{prefix}1` to `{prefix}{lanes}` (one lane each) in turn: work `i` deletes Namespace
/// `i % lanes + 1` for the `(first + i / lanes)`th time and is due at `due` (SQL of `i`).
pub fn deletions(prefix: &str, lanes: i64, first: i64, lo: i64, hi: i64, due: &str) -> String {
    format!(
        "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, available_at)
         SELECT format('namespace:{prefix}%s:delete:%s', i % {lanes} + 1, {first} + i / {lanes}),
                '{prefix}' || (i % {lanes} + 1), 'deleted', 'admin', {due}
         FROM generate_series({lo}, {hi}) i ORDER BY i"
    )
}

/// Namespaces `<prefix>1..=<n>`, ready.
pub fn namespaces(c: &mut Client, prefix: &str, n: i64) -> Result<(), BenchError> {
    c.batch_execute(&format!(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by)
         SELECT '{prefix}' || l, '{prefix}' || l, 'ready', 'admin' FROM generate_series(1, {n}) l"
    ))
    .map_err(step("namespaces"))
}

/// `SHOW fsync` and the other settings of the server measured that durability depends on.
pub fn durability(admin: &str) -> Result<Value, BenchError> {
    let mut c = occ_worker::db::connect(admin, TIMEOUT)?;
    let show = |c: &mut Client, what: &str| -> Result<String, BenchError> {
        Ok(c.query_one(&format!("SHOW {what}"), &[])?.get(0))
    };
    Ok(json!({
        "fsync": show(&mut c, "fsync")?,
        "synchronousCommit": show(&mut c, "synchronous_commit")?,
        "fullPageWrites": show(&mut c, "full_page_writes")?,
        "serverVersion": show(&mut c, "server_version")?,
    }))
}

/// The benchmark's Compute Driver: `Noop` never calls it, and every call is refused.
pub struct Unused;

/// The answer of a Compute Driver method a benchmark load never calls.
pub fn unused<T>() -> Result<T, ComputeError> {
    Err(ComputeError::permanent(
        "BENCH_DRIVER_UNUSED",
        "bench",
        None,
    ))
}

impl ComputeDriver for Unused {
    fn id(&self) -> &str {
        "bench"
    }
    fn implementation(&self) -> &str {
        "bench"
    }
    fn preflight(&self, _c: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        Ok(Vec::new())
    }
    fn ensure_namespace(
        &self,
        _n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        unused()
    }
    fn delete_namespace(
        &self,
        _n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        unused()
    }
    fn prepare_revision(
        &self,
        _r: &RevisionSpec,
        _c: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        unused()
    }
    fn deactivate_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn bind_agent(&self, _a: &AgentSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn activate_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn stop_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn retire_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        unused()
    }
    fn delete_agent_runtime_credentials(
        &self,
        _a: &AgentSpec,
        _c: &CancelToken,
    ) -> Result<(), ComputeError> {
        unused()
    }
    fn policy(&self) -> &dyn DriverPolicy {
        self
    }
}

impl DriverPolicy for Unused {
    fn requires_stopped_predecessors(&self, _r: &RevisionSpec) -> bool {
        false
    }
}
