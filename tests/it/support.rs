//! Test support: a fresh, migrated PostgreSQL database per test, cloned from a template.
//!
//! The server comes from `OCC_TEST_DATABASE_URL` (an admin URL; `scripts/test` starts a
//! throwaway cluster and sets it). Every test gets its own database, dropped on drop.

#![allow(dead_code)] // Helpers are shared by modules that each use a subset.

use occ_worker::cancel::CancelToken;
use occ_worker::compute::{
    AgentSpec, ComputeDriver, ComputeError, DriverPolicy, NamespaceObservation, NamespaceSpec,
    PreflightWarning, RevisionObservation, RevisionSpec,
};
use occ_worker::config::Mode;
use occ_worker::db;
use occ_worker::events::Events;
use occ_worker::metrics::Metrics;
use occ_worker::queue::QueueOptions;
use occ_worker::reconcile::Context;
use occ_worker::runtime::RuntimeOptions;
use postgres::{Client, NoTls};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::canary::{canary, holds_canary, CANARY_MARKER};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static COUNTER: AtomicUsize = AtomicUsize::new(0);
static TEMPLATE: OnceLock<String> = OnceLock::new();

/// The admin URL of the test server.
pub fn admin_url() -> String {
    std::env::var("OCC_TEST_DATABASE_URL").expect(
        "OCC_TEST_DATABASE_URL is not set: run the tests through scripts/test, which starts PostgreSQL",
    )
}

fn with_db(url: &str, db: &str) -> String {
    let base = url.rsplit_once('/').map(|(b, _)| b).unwrap_or(url);
    format!("{base}/{db}")
}

/// The migrated template every `TestDb::new` clones: one per test build, shared by every test
/// process of it (nextest runs each test in a process of its own, and a migration run per test
/// would cost more than most tests). Its name is a hash of this binary's path, size and
/// modification time, so a rebuild (new migrations) gets a new template. The first process
/// builds it under a PostgreSQL advisory lock, as `occ_tpl_build_HASH` renamed when migrated,
/// so a process killed half-way never leaves a half-migrated template to clone; the others
/// wait on the lock and find it. Templates of other builds and test databases of processes
/// that are gone are dropped then, so repeated runs do not pile databases up.
fn template() -> &'static str {
    TEMPLATE.get_or_init(|| {
        use sha2::Digest;
        let exe = std::env::current_exe().expect("the test binary's path");
        let meta = std::fs::metadata(&exe).expect("the test binary's metadata");
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        let digest = sha2::Sha256::digest(format!("{}\n{}\n{modified}", exe.display(), meta.len()));
        let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let name = format!("occ_tpl_{hash}");
        let admin = admin_url();
        let mut client = Client::connect(&admin, NoTls).expect("connect to test server");
        // One key for every template build: builds of two test binaries take turns too.
        client
            .execute(
                "SELECT pg_advisory_lock(hashtext('occ test template'))",
                &[],
            )
            .expect("take the template lock");
        let exists: bool = client
            .query_one(
                "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)",
                &[&name],
            )
            .expect("look for the template")
            .get(0);
        if !exists {
            drop_stale_databases(&mut client, &name);
            let building = format!("occ_tpl_build_{hash}");
            client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"))
                .expect("drop a template build left half-way");
            client
                .batch_execute(&format!("CREATE DATABASE {building}"))
                .expect("create the template database");
            let mut tpl =
                Client::connect(&with_db(&admin, &building), NoTls).expect("connect template");
            occ_worker::migrate::run(&mut tpl).expect("migrate template");
            drop(tpl);
            client
                .batch_execute(&format!("ALTER DATABASE {building} RENAME TO {name}"))
                .expect("name the migrated template");
        }
        client
            .execute(
                "SELECT pg_advisory_unlock(hashtext('occ test template'))",
                &[],
            )
            .expect("release the template lock");
        name
    })
}

/// Drops the templates of other test builds and the test databases (`occ_t_PID_N`) whose
/// process is gone.
fn drop_stale_databases(client: &mut Client, keep: &str) {
    let stale: Vec<String> = client
        .query(
            "SELECT datname FROM pg_database
             WHERE datname ~ '^occ_(tpl_[0-9a-f]+|tpl_build_[0-9a-f]+|template_[0-9]+|t_[0-9]+_[0-9]+)$'",
            &[],
        )
        .expect("list test databases")
        .iter()
        .map(|r| r.get(0))
        .filter(|db: &String| match db.strip_prefix("occ_t_") {
            Some(rest) => {
                let pid = rest.split('_').next().unwrap_or("");
                !std::path::Path::new(&format!("/proc/{pid}")).exists()
            }
            None => db != keep,
        })
        .collect();
    for db in stale {
        let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
    }
}

/// A fresh migrated database, dropped when this value drops.
pub struct TestDb {
    pub url: String,
    pub name: String,
}

impl TestDb {
    pub fn new() -> TestDb {
        // Nothing stays connected to the template, so clones may run in parallel.
        TestDb::create(&format!(" TEMPLATE {}", template()))
    }

    /// A fresh empty database (no schema, not migrated), dropped when this value drops.
    pub fn empty() -> TestDb {
        TestDb::create("")
    }

    /// `CREATE DATABASE` of a fresh name, with `options`.
    fn create(options: &str) -> TestDb {
        install_test_logger();
        let name = format!(
            "occ_t_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        let mut admin = Client::connect(&admin_url(), NoTls).expect("connect to test server");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}{options}"))
            .expect("create test database");
        TestDb {
            url: with_db(&admin_url(), &name),
            name,
        }
    }

    /// A bootstrapped database with the ready Namespace `ns` holding the Agent `agent`
    /// (no revisions), and a client on it.
    pub fn with_agent(ns: &str, agent: &str) -> (TestDb, Client) {
        let db = TestDb::bootstrapped();
        let mut c = db.client();
        insert_namespace(&mut c, ns, "ready");
        insert_agent(&mut c, ns, agent, 0);
        (db, c)
    }

    /// A fresh database with the Installation `inst` and administrator `admin` bootstrapped.
    pub fn bootstrapped() -> TestDb {
        let db = TestDb::new();
        db.client()
            .execute("SELECT occ.bootstrap('inst', 'admin')", &[])
            .expect("bootstrap");
        db
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to test database")
    }

    pub fn pool(&self, size: u32) -> db::Pool {
        db::pool(&self.url, Duration::from_secs(10), size).expect("test pool")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut admin) = Client::connect(&admin_url(), NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// Inserts a Namespace row directly (tests that exercise the queue, not admission).
pub fn insert_namespace(client: &mut Client, id: &str, status: &str) {
    client
        .execute(
            "INSERT INTO occ.namespaces_all (id, name, status, created_by) VALUES ($1, $1, $2, 'admin')",
            &[&id, &status],
        )
        .expect("insert namespace");
}

/// Inserts the Namespace `id` (provisioning) and its ensure work directly.
pub fn enqueue_ensure(client: &mut Client, id: &str) {
    insert_namespace(client, id, "provisioning");
    client
        .execute(
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
             VALUES ('namespace:' || $1 || ':ensure', $1, 'ready', 'admin')",
            &[&id],
        )
        .expect("insert ensure work");
}

/// The state of the Namespace `id`'s ensure work.
pub fn ensure_state(client: &mut Client, id: &str) -> String {
    work_state(client, &format!("namespace:{id}:ensure")).0
}

/// The details of the audit event `action` (the only one).
pub fn audit_details(client: &mut Client, action: &str) -> Value {
    client
        .query_one(
            "SELECT details FROM occ.audit_events WHERE action = $1",
            &[&action],
        )
        .expect("one audit event")
        .get(0)
}

/// Inserts a Namespace, an Agent with its service principal, and `revisions` revisions
/// (`<agent>-r<n>`) in one transaction: the principal and the Agent name each other through
/// deferred foreign keys.
pub fn insert_agent(client: &mut Client, namespace_id: &str, agent_id: &str, revisions: u32) {
    let principal = format!("{agent_id}-sp");
    let mut tx = client.transaction().expect("begin");
    tx.execute(
        "INSERT INTO occ.identities (id, kind, namespace_id, agent_id) VALUES ($1, 'service_principal', $2, $3)",
        &[&principal, &namespace_id, &agent_id],
    )
    .expect("insert principal");
    tx.execute(
        "INSERT INTO occ.agents (id, namespace_id, name, service_principal_id, created_by) VALUES ($1, $2, $1, $3, 'admin')",
        &[&agent_id, &namespace_id, &principal],
    )
    .expect("insert agent");
    for n in 1..=revisions as i32 {
        let id = format!("{agent_id}-r{n}");
        tx.execute(
            "INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id,
                 service_principal_id, configuration_id, configuration_generation, document,
                 harness_id, harness_version, harness_mode, execution_mode, compute_id,
                 compute_implementation)
             VALUES ($1, $2, $3, $4, 'admin', $5, 'cfg', 1, '{}', 'codex', '1.0.0', 'dedicated',
                 'dedicated', 'docker', 'docker')",
            &[&id, &namespace_id, &agent_id, &n, &principal],
        )
        .expect("insert revision");
    }
    tx.commit().expect("commit agent");
}

/// A Compute Driver that refuses everything: for passes that must never reach infrastructure.
pub struct InertCompute;

fn inert<T>() -> Result<T, ComputeError> {
    Err(ComputeError::permanent("TEST_DRIVER_INERT", "inert", None))
}

impl ComputeDriver for InertCompute {
    fn id(&self) -> &str {
        "inert"
    }
    fn implementation(&self) -> &str {
        "inert"
    }
    fn preflight(&self, _c: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        inert()
    }
    fn ensure_namespace(
        &self,
        _n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        inert()
    }
    fn delete_namespace(
        &self,
        _n: &NamespaceSpec,
        _c: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        inert()
    }
    fn prepare_revision(
        &self,
        _r: &RevisionSpec,
        _c: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        inert()
    }
    fn deactivate_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        inert()
    }
    fn bind_agent(&self, _a: &AgentSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        inert()
    }
    fn activate_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        inert()
    }
    fn stop_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        inert()
    }
    fn retire_revision(&self, _r: &RevisionSpec, _c: &CancelToken) -> Result<(), ComputeError> {
        inert()
    }
    fn delete_agent_runtime_credentials(
        &self,
        _a: &AgentSpec,
        _c: &CancelToken,
    ) -> Result<(), ComputeError> {
        inert()
    }
    fn policy(&self) -> &dyn DriverPolicy {
        self
    }
}

impl DriverPolicy for InertCompute {
    fn requires_stopped_predecessors(&self, _r: &RevisionSpec) -> bool {
        false
    }
}

/// The suite's capture directory (`OCC_TEST_LOG_DIR`, set by `scripts/test`): every worker log
/// line and event a test produces is also written under it, for `scripts/canary-scan`.
pub fn log_dir() -> Option<&'static std::path::Path> {
    static DIR: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::path::PathBuf::from(std::env::var_os("OCC_TEST_LOG_DIR")?).join("it");
        std::fs::create_dir_all(&dir).expect("create the test log directory");
        Some(dir)
    })
    .as_deref()
}

/// A new file in the capture directory for `what` (`worker.stdout`, `events`), named after the
/// running test; `None` when no capture directory is set.
pub fn log_file(what: &str) -> Option<std::fs::File> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = log_dir()?;
    // A file name holds at most 255 bytes: the test's name is cut to leave room for the rest.
    let test: String = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .replace("::", ".")
        .chars()
        .take(160)
        .collect();
    let what: String = what.chars().take(48).collect();
    let name: String = format!(
        "{test}.{what}.{}-{}.log",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
    .chars()
    .map(|c| {
        if c.is_ascii_alphanumeric() || "._-".contains(c) {
            c
        } else {
            '_'
        }
    })
    .collect();
    let path = dir.join(&name);
    Some(std::fs::File::create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display())))
}

/// Appends `out`'s stdout and stderr (a finished worker, hook or sender process) to the
/// capture directory under `what`; returns `out`.
pub fn logged(what: &str, out: std::process::Output) -> std::process::Output {
    if let Some(mut f) = log_file(what) {
        let _ = f.write_all(&out.stdout);
        let _ = f.write_all(b"\n--- stderr ---\n");
        let _ = f.write_all(&out.stderr);
    }
    out
}

/// `Command::output` that also appends what the process wrote to the capture directory (see
/// `logged`): for every `occ-worker` a test runs and reads itself.
pub trait LoggedOutput {
    fn logged_output(&mut self, what: &str) -> std::io::Result<std::process::Output>;
}

impl LoggedOutput for Command {
    fn logged_output(&mut self, what: &str) -> std::io::Result<std::process::Output> {
        self.output().map(|out| logged(what, out))
    }
}

/// A child's stdout or stderr into a new capture file for `what` (`Stdio::null()` without a
/// capture directory): for a process whose output no test reads.
pub fn log_stdio(what: &str) -> Stdio {
    log_file(what).map_or_else(Stdio::null, Stdio::from)
}

/// Copies a log a script wrote (`target/kind-worker.log`) into the capture directory under
/// `what`; nothing when it does not exist.
pub fn log_copy(what: &str, path: &std::path::Path) {
    if let (Ok(text), Some(mut f)) = (std::fs::read(path), log_file(what)) {
        let _ = f.write_all(&text);
    }
}

/// The lines of a reference server's stdout (`occ-hook`, `occ-git-sender`) that a test reads
/// itself, each also written to the capture directory under `what`.
pub fn logged_lines(out: impl Read, what: &str) -> impl Iterator<Item = std::io::Result<String>> {
    let mut file = log_file(what);
    BufReader::new(out).lines().inspect(move |line| {
        if let (Some(f), Ok(line)) = (&mut file, line) {
            let _ = writeln!(f, "{line}");
        }
    })
}

/// A finished command's stderr (its diagnostics; its stdout is an answer, not a log) into the
/// capture directory under `what`.
pub fn log_stderr(what: &str, stderr: &[u8]) {
    if let Some(mut f) = log_file(&format!("{what}.stderr")) {
        let _ = f.write_all(stderr);
    }
}

/// Events written to the capture directory (or dropped without one): what a `Context`
/// whose events no test reads emits.
pub fn logged_events() -> Events {
    install_test_logger();
    match log_file("events") {
        Some(f) => Events::to(Box::new(f)),
        None => Events::discard(),
    }
}

/// The `log` records of every in-process runtime, at trace level, into the capture directory
/// (one file per test process); installed once, by the helpers nearly every test calls.
pub fn install_test_logger() {
    struct FileLogger(Mutex<std::fs::File>);
    impl log::Log for FileLogger {
        // What the worker's own logger could write at its most verbose, but for the database
        // driver's connection state machine: only fixed words ("poll_read: done"), and
        // most of the volume.
        fn enabled(&self, m: &log::Metadata) -> bool {
            occ_worker::events::log_target_allowed(m.target())
                && !(m.target() == "tokio_postgres::connection" && m.level() == log::Level::Trace)
        }
        fn log(&self, r: &log::Record) {
            if !self.enabled(r.metadata()) {
                return;
            }
            let thread = std::thread::current();
            let line = format!(
                "{} {} [{}] {}\n",
                r.level(),
                r.target(),
                thread.name().unwrap_or("-"),
                r.args()
            );
            let _ = self.0.lock().unwrap().write_all(line.as_bytes());
        }
        fn flush(&self) {}
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Some(dir) = log_dir() else { return };
        let file = std::fs::File::create(dir.join(format!("log-{}.log", std::process::id())))
            .expect("create the test log");
        if log::set_boxed_logger(Box::new(FileLogger(Mutex::new(file)))).is_ok() {
            log::set_max_level(log::LevelFilter::Trace);
        }
    });
}

/// Event lines captured in memory, and in the capture directory when there is one.
#[derive(Clone)]
pub struct Captured(Arc<Mutex<Vec<u8>>>, Option<Arc<Mutex<std::fs::File>>>);

impl Default for Captured {
    fn default() -> Captured {
        install_test_logger();
        Captured(
            Arc::default(),
            log_file("events").map(|f| Arc::new(Mutex::new(f))),
        )
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        if let Some(f) = &self.1 {
            let _ = f.lock().unwrap().write_all(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Every captured event as JSON.
    pub fn events(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub fn named(&self, name: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == name)
            .collect()
    }
}

/// A `Context` for the tests, with the defaults they share: Installation `inst`, a lease of
/// 30 s and 3 attempts, a convergence timeout of 900 s, events discarded, no sandbox choice
/// and no Credential Gateway. Every test builds its `Context` here.
pub struct ContextBuilder(Context);

/// Starts a `Context` over `pool` with the Compute Driver `compute`.
pub fn context_with(pool: db::Pool, compute: Arc<dyn ComputeDriver>) -> ContextBuilder {
    ContextBuilder(Context {
        pool,
        compute,
        installation_id: "inst".into(),
        queue: QueueOptions::new(Duration::from_secs(30), 3),
        convergence_timeout: Duration::from_secs(900),
        events: logged_events(),
        metrics: Metrics::new(),
        sandbox: Default::default(),
        credential_gateway: None,
        mode: Mode::Development,
        repository_sender: None,
    })
}

impl ContextBuilder {
    /// The same `Context` as `ctx` but for its events.
    pub fn like(ctx: &Context) -> ContextBuilder {
        ContextBuilder(Context {
            pool: ctx.pool.clone(),
            compute: ctx.compute.clone(),
            installation_id: ctx.installation_id.clone(),
            queue: ctx.queue,
            convergence_timeout: ctx.convergence_timeout,
            events: logged_events(),
            metrics: ctx.metrics.clone(),
            sandbox: ctx.sandbox.clone(),
            credential_gateway: ctx.credential_gateway.clone(),
            mode: ctx.mode,
            repository_sender: ctx.repository_sender.clone(),
        })
    }
    pub fn installation(mut self, id: &str) -> Self {
        self.0.installation_id = id.into();
        self
    }
    pub fn queue(mut self, queue: QueueOptions) -> Self {
        self.0.queue = queue;
        self
    }
    pub fn convergence(mut self, timeout: Duration) -> Self {
        self.0.convergence_timeout = timeout;
        self
    }
    pub fn events(mut self, events: Events) -> Self {
        self.0.events = events;
        self
    }
    pub fn credential_gateway(mut self, gateway: Option<String>) -> Self {
        self.0.credential_gateway = gateway;
        self
    }
    pub fn mode(mut self, mode: Mode) -> Self {
        self.0.mode = mode;
        self
    }
    pub fn repository_sender(
        mut self,
        sender: Option<Arc<occ_worker::repository::RepositorySender>>,
    ) -> Self {
        self.0.repository_sender = sender;
        self
    }
    pub fn build(self) -> Arc<Context> {
        Arc::new(self.0)
    }
}

/// A `Context` over `db` with the inert driver; events go to the returned capture.
pub fn context(db: &TestDb, lease: Duration, max_attempts: i32) -> (Arc<Context>, Captured) {
    let captured = Captured::default();
    let ctx = context_with(db.pool(40), Arc::new(InertCompute))
        .queue(QueueOptions::new(lease, max_attempts))
        .events(Events::to(Box::new(captured.clone())))
        .build();
    (ctx, captured)
}

/// Runtime options for an in-process worker listening on `db`.
pub fn runtime_options(db: &TestDb, concurrency: usize) -> RuntimeOptions {
    RuntimeOptions {
        concurrency,
        poll_interval: Duration::from_millis(250),
        shutdown_grace: Duration::from_secs(5),
        listen_url: Some(db.url.clone()),
        db_timeout: Duration::from_secs(10),
    }
}

/// The resources some tests must not share with another test running at the same time. Each
/// is a nextest test group of the same name with `max-threads = 1` (`.config/nextest.toml`);
/// `conventions::every_test_taking_a_turn_is_in_its_nextest_group` keeps the two lists one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// The shared Docker Engine under hundreds of network operations (the subnet run, the
    /// 50-Namespace CLI run, the hooks' Docker run): run side by side on a 2-core machine, the
    /// daemon answers later than a lease-bounded request may wait, and each would measure the
    /// other's load instead of its own behaviour.
    DockerHeavy,
    /// The walk-throughs that listen where the documents say (the worker's 127.0.0.1:9465, the
    /// hook's 9443, the sender's 9444).
    DocumentedPorts,
}

impl Turn {
    /// The nextest test group (and lock file) name.
    pub fn group(self) -> &'static str {
        match self {
            Turn::DockerHeavy => "docker-heavy",
            Turn::DocumentedPorts => "documented-ports",
        }
    }
}

/// Held while a test has its turn; released (the file lock with its descriptor) on drop.
pub struct TurnGuard(std::fs::File);

/// Waits until no other test, in this process or another (nextest runs every test in a process
/// of its own; another checkout's `scripts/test` shares the Engine and the ports), holds
/// `turn`, and holds it until the guard drops: an exclusive `flock` on
/// `/tmp/occ-test-turn-GROUP.lock` (under `OCC_TEST_SHARED_TMPDIR` when it is set: `scripts/test`
/// gives its tests a temporary directory of their own and names the shared one there), which
/// the kernel releases when the process dies. Locks of separate opens conflict within one
/// process too, so libtest's threads take turns as well.
pub fn take_turn(turn: Turn) -> TurnGuard {
    use std::os::unix::io::AsRawFd;
    let shared = std::env::var_os("OCC_TEST_SHARED_TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = shared.join(format!("occ-test-turn-{}.lock", turn.group()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    loop {
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return TurnGuard(file);
        }
        let error = std::io::Error::last_os_error();
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::Interrupted,
            "flock {}: {error}",
            path.display()
        );
    }
}

/// Removes, on drop, every Docker network and container labelled `label` (`KEY=VALUE`), so a
/// test that fails half-way leaves the shared Engine's address pools as it found them. Name
/// a label only this test's objects carry (its own installation id or Namespace ids).
pub struct DockerLeftovers(pub Vec<String>);

impl Drop for DockerLeftovers {
    fn drop(&mut self) {
        for label in &self.0 {
            for (kind, rm) in [
                (["ps", "-aq"].as_slice(), ["rm", "-f"].as_slice()),
                (
                    ["network", "ls", "-q"].as_slice(),
                    ["network", "rm"].as_slice(),
                ),
            ] {
                let listed = Command::new("docker")
                    .args(kind)
                    .args(["--filter", &format!("label={label}")])
                    .output();
                let Ok(out) = listed else { continue };
                for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("docker").args(rm).arg(id).output();
                }
            }
        }
    }
}

/// Polls `probe` every `every` until it answers `Some` or `limit` passes (then `None`): the
/// one place the tests wait for time to pass.
pub fn poll<T>(
    limit: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now().checked_add(limit);
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return None;
        }
        let left = deadline.map_or(every, |d| d - now);
        std::thread::sleep(every.min(left));
    }
}

/// Polls `probe` every 20 ms until it answers `Some`; panics with `what` after `limit`.
pub fn wait_value<T>(what: &str, limit: Duration, probe: impl FnMut() -> Option<T>) -> T {
    poll(limit, Duration::from_millis(20), probe)
        .unwrap_or_else(|| panic!("timed out after {limit:?} waiting for {what}"))
}

/// Polls `done` every 20 ms until it holds or `limit` passes; panics with `what` on timeout.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    wait_value(what, limit, || done().then_some(()))
}

/// Checks `holds` every 20 ms for `period`; panics with `what` the first time it fails.
pub fn holds_for(what: &str, period: Duration, mut holds: impl FnMut() -> bool) {
    let broke = poll(period, Duration::from_millis(20), || {
        (!holds()).then_some(())
    });
    assert!(broke.is_none(), "{what} stopped holding within {period:?}");
}

/// Asserts `e` is the cancellation of a refused renewal, returned within `within` of `refused`.
pub fn assert_aborted_on_refusal(
    e: &ComputeError,
    (refused, returned): (Instant, Instant),
    within: Duration,
) {
    use occ_worker::cancel::{Cancelled, LossCause};
    assert_eq!(
        e.kind(),
        &occ_worker::compute::ComputeErrorKind::Cancelled(Cancelled(LossCause::RenewalRefused))
    );
    assert!(
        returned.duration_since(refused) < within,
        "aborted {:?} after the refusal",
        returned.duration_since(refused)
    );
}

/// Cancels `token` with `cause` after `delay`, on a thread that answers when it did.
pub fn cancel_after(
    token: &CancelToken,
    delay: Duration,
    cause: occ_worker::cancel::LossCause,
) -> JoinHandle<Instant> {
    let token = token.clone();
    std::thread::spawn(move || {
        let _ = poll(delay, delay, || None::<()>);
        token.cancel(cause);
        Instant::now()
    })
}

/// The next connection on the non-blocking `listener`, polled every 5 ms; `None` once `stop`
/// is set.
pub fn accept_until(
    listener: &std::net::TcpListener,
    stop: &std::sync::atomic::AtomicBool,
) -> Option<std::net::TcpStream> {
    poll(Duration::MAX, Duration::from_millis(5), || {
        if stop.load(Ordering::SeqCst) {
            return Some(None);
        }
        listener.accept().ok().map(|(client, _)| Some(client))
    })
    .flatten()
}

/// Waits up to `limit` for `child` to exit; `None` when it is still running then.
pub fn child_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    poll(limit, Duration::from_millis(20), || {
        child.try_wait().expect("try_wait")
    })
}

/// `admin agent deploy NS AGENT` of the dedicated Codex harness with `configuration`, then
/// `more` (the CLI's arguments, without the global flags).
pub fn deploy_args<'a>(
    ns: &'a str,
    agent: &'a str,
    configuration: &'a str,
    more: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["admin", "agent", "deploy", ns, agent, "--configuration"];
    args.extend([configuration, "--harness", "codex", "--mode", "dedicated"]);
    args.extend_from_slice(more);
    args
}

/// Runs `cmd`; panics with `what` and its stderr unless it exits successfully.
pub fn output_ok(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = logged(
        what,
        cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}")),
    );
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The JSON that `cmd` prints on success (see `output_ok`).
pub fn json_ok(cmd: &mut Command, what: &str) -> Value {
    serde_json::from_slice(&output_ok(cmd, what).stdout).expect("JSON output")
}

/// The first two columns of the one row `sql` answers for `params`.
pub fn row2<A, B>(
    client: &mut Client,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> (A, B)
where
    A: for<'a> postgres::types::FromSql<'a>,
    B: for<'a> postgres::types::FromSql<'a>,
{
    let row = client.query_one(sql, params).expect(sql);
    (row.get(0), row.get(1))
}

/// The first three columns of the one row `sql` answers for `params`.
pub fn row3<A, B, C>(
    client: &mut Client,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> (A, B, C)
where
    A: for<'a> postgres::types::FromSql<'a>,
    B: for<'a> postgres::types::FromSql<'a>,
    C: for<'a> postgres::types::FromSql<'a>,
{
    let row = client.query_one(sql, params).expect(sql);
    (row.get(0), row.get(1), row.get(2))
}

/// The `(state, reason_code)` of the work `key` (SPEC Q1).
pub fn work_state(client: &mut Client, key: &str) -> (String, Option<String>) {
    row2(
        client,
        "SELECT state, reason_code FROM occ.work_status WHERE idempotency_key = $1",
        &[&key],
    )
}

/// The work `key`, for assertions on how it ended: `expect_work(&mut c, key).completed_with("CODE")`.
pub fn expect_work<'c>(client: &'c mut Client, key: &'c str) -> ExpectWork<'c> {
    ExpectWork { client, key }
}

pub struct ExpectWork<'c> {
    client: &'c mut Client,
    key: &'c str,
}

impl ExpectWork<'_> {
    /// Asserts the work ended `state` with `code`.
    pub fn ended(self, state: &str, code: &str) {
        let (s, c) = work_state(self.client, self.key);
        assert_eq!(
            (s.as_str(), c.as_deref()),
            (state, Some(code)),
            "work {}",
            self.key
        );
    }
    /// Asserts the work succeeded with `code`.
    pub fn completed_with(self, code: &str) {
        self.ended("succeeded", code)
    }
    /// Asserts the work failed for good with `code`.
    pub fn failed_with(self, code: &str) {
        self.ended("failed_permanent", code)
    }
}

/// One value from a one-row, one-column query.
pub fn scalar<T: for<'a> postgres::types::FromSql<'a>>(client: &mut Client, sql: &str) -> T {
    client.query_one(sql, &[]).expect(sql).get(0)
}

/// The first column of the one row `sql` answers for `params`.
pub fn one<T: for<'a> postgres::types::FromSql<'a>>(
    client: &mut impl postgres::GenericClient,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> T {
    client.query_one(sql, params).expect(sql).get(0)
}

/// A fresh Unix socket path under the temporary directory, named `occ-<what>-<pid>-<n>.sock`
/// (nothing there).
pub fn socket_path(what: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "occ-{what}-{}-{}.sock",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_file(&path);
    path
}

/// A loopback port nobody listens on (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A worker process under test: killed (SIGKILL) on drop if still running; its stdout event
/// lines and stderr are captured by reader threads.
pub struct WorkerProcess {
    pub child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

/// A child process's whole environment.
pub type Env = Vec<(&'static str, String)>;

/// The binary with a clean environment: only what `env` names is set.
pub fn worker_command(args: &[&str], env: &[(&str, String)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_occ-worker"));
    cmd.args(args).env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The environment of a development worker on `url` with the probe-friendly defaults.
pub fn worker_env(url: &str) -> Env {
    vec![
        ("OCC_DATABASE_URL", url.to_string()),
        ("OCC_COMPUTE_DRIVER", "docker".into()),
        ("OCC_WORKER_HTTP_ADDR", "127.0.0.1:0".into()),
        ("OCC_WORKER_DB_TIMEOUT_MS", "5000".into()),
    ]
}

impl WorkerProcess {
    /// Starts `occ-worker run --test-reconciler <reconciler>` with `env`.
    pub fn start(reconciler: &str, env: &[(&str, String)]) -> WorkerProcess {
        if !cfg!(feature = "test-tooling") {
            panic!(
                "`run --test-reconciler` needs the test-tooling feature: run through scripts/test"
            );
        }
        let child = worker_command(&["run", "--test-reconciler", reconciler], env)
            .spawn()
            .expect("spawn occ-worker");
        WorkerProcess::capture(child)
    }

    pub fn capture(mut child: Child) -> WorkerProcess {
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        let lines = stdout.clone();
        let text = stderr.clone();
        let (mut out_log, mut err_log) = (log_file("worker.stdout"), log_file("worker.stderr"));
        let readers = vec![
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if let Some(f) = &mut out_log {
                        let _ = writeln!(f, "{line}");
                    }
                    lines.lock().unwrap().push(line);
                }
            }),
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = BufReader::new(err).read_to_string(&mut s);
                if let Some(f) = &mut err_log {
                    let _ = f.write_all(s.as_bytes());
                }
                text.lock().unwrap().push_str(&s);
            }),
        ];
        WorkerProcess {
            child,
            stdout,
            stderr,
            readers,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Every stdout event so far, parsed.
    pub fn events(&self) -> Vec<Value> {
        self.stdout
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// `signal` (`TERM`, `KILL`), then everything the process wrote, its stdout lines then its
    /// stderr, once it exited within `limit`: what a test searches for what must never be logged.
    pub fn signal_output(self, signal: &str, limit: Duration) -> String {
        self.signal(signal);
        let stdout = self.stdout.clone();
        let (_, stderr) = self.wait(limit);
        let mut text = stdout.lock().unwrap().join("\n");
        text.push('\n');
        text.push_str(&stderr);
        text
    }

    pub fn has_event(&self, name: &str) -> bool {
        self.events().iter().any(|e| e["event"] == name)
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits for exit up to `limit`; returns the status and stderr (readers joined).
    pub fn wait(mut self, limit: Duration) -> (ExitStatus, String) {
        let Some(status) = child_exit(&mut self.child, limit) else {
            let _ = self.child.kill();
            panic!(
                "occ-worker did not exit within {limit:?}; stderr: {}",
                self.stderr.lock().unwrap()
            );
        };
        for r in std::mem::take(&mut self.readers) {
            let _ = r.join();
        }
        let stderr = self.stderr.lock().unwrap().clone();
        (status, stderr)
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Renews `cancel`'s lease every `every` until `stop`, as the heartbeat thread does (W2).
pub fn heartbeat(
    cancel: &CancelToken,
    every: Duration,
    lease: Duration,
) -> (Arc<std::sync::atomic::AtomicBool>, JoinHandle<()>) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (token, stopping) = (cancel.clone(), stop.clone());
    let thread = std::thread::spawn(move || {
        let _ = poll(Duration::MAX, every, || {
            if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                return Some(());
            }
            token.confirm_lease(Instant::now() + lease);
            None
        });
    });
    (stop, thread)
}

/// An in-process worker with the real Namespace reconciler and the Docker driver at
/// `docker_host`, its subnets from `pool`, concurrency 2; stopped (and joined) on drop.
pub struct NamespaceWorker {
    stop: occ_worker::runtime::StopHandle,
    running: Option<JoinHandle<std::io::Result<()>>>,
}

/// What differs between the in-process Namespace workers of the tests.
pub struct NamespaceWorkerOptions<'a> {
    pub installation: &'a str,
    pub docker_host: &'a str,
    pub pool: &'a str,
    pub lease: Duration,
    pub events: Events,
}

impl NamespaceWorker {
    pub fn start(db: &TestDb, o: NamespaceWorkerOptions<'_>) -> NamespaceWorker {
        use occ_worker::compute::docker::{DockerDriver, SubnetPool};
        let pool: SubnetPool = o.pool.parse().expect("pool");
        let driver = DockerDriver::new(o.docker_host).expect("driver");
        let ctx = context_with(db.pool(8), Arc::new(driver.with_subnet_pool(pool)))
            .installation(o.installation)
            .queue(QueueOptions::new(o.lease, 5))
            .convergence(Duration::from_secs(120))
            .events(o.events)
            .build();
        let worker = namespace_worker(ctx, Some(db.url.clone()));
        let stop = worker.stop_handle();
        NamespaceWorker {
            stop,
            running: Some(std::thread::spawn(move || worker.run())),
        }
    }
}

/// A worker with only the Namespace reconciler, concurrency 2, polling every 50 ms and
/// listening on `listen_url` when given.
pub fn namespace_worker(
    ctx: Arc<Context>,
    listen_url: Option<String>,
) -> occ_worker::runtime::Worker {
    use occ_worker::queue::Operation;
    use occ_worker::reconcile::namespace::NamespaceReconciler;
    use occ_worker::reconcile::Registry;
    let r = Arc::new(NamespaceReconciler);
    let registry = Registry::new()
        .with(Operation::NamespaceEnsure, r.clone())
        .with(Operation::NamespaceDelete, r);
    let options = RuntimeOptions {
        concurrency: 2,
        poll_interval: Duration::from_millis(50),
        shutdown_grace: Duration::from_secs(5),
        listen_url,
        db_timeout: Duration::from_secs(5),
    };
    occ_worker::runtime::Worker::new(ctx, registry, options)
}

impl Drop for NamespaceWorker {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(running) = self.running.take() {
            running.join().expect("worker thread").expect("worker run");
        }
    }
}

/// Sends `request` to `addr` (errors ignored: the server may close early) and returns the
/// status line's code, or `None` when the connection closed without one.
pub fn http_exchange(addr: impl std::net::ToSocketAddrs, request: &[u8]) -> Option<u16> {
    http_response(addr, request).map(|(status, _)| status)
}

/// `http_exchange`, with the body after the head (read to the connection's end).
fn http_response(addr: impl std::net::ToSocketAddrs, request: &[u8]) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let _ = stream.write_all(request);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let status = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Some((status, body.to_string()))
}

/// The status code and body of `GET path` on `addr`, from a server that closes the connection
/// after its answer.
pub fn http_get_text(addr: impl std::net::ToSocketAddrs, path: &str) -> Option<(u16, String)> {
    http_response(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
}

/// The status code of `GET path` on `addr`.
pub fn http_get(addr: impl std::net::ToSocketAddrs, path: &str) -> Option<u16> {
    http_exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
}

/// A revision with nothing but its identity and harness (no document, auth or Secrets), of
/// Installation `inst`, for the tests that call a driver directly.
pub fn bare_revision(
    namespace_id: &str,
    agent_id: &str,
    (revision_id, revision): (&str, i32),
    (harness_id, mode): (&str, &str),
) -> RevisionSpec {
    RevisionSpec {
        installation_id: "inst".into(),
        namespace_id: namespace_id.into(),
        agent_id: agent_id.into(),
        revision_id: revision_id.into(),
        revision,
        service_principal_id: "sp-1".into(),
        harness_id: harness_id.into(),
        harness_version: "1.0.0".into(),
        harness_mode: occ_worker::compute::HarnessMode::parse(mode).expect("a harness mode"),
        execution_mode: mode.into(),
        document: serde_json::json!({}),
        harness_auth: None,
        secret_bindings: serde_json::json!({}),
        secrets: vec![],
        harness_secret: None,
        managed_account: None,
        backend_id: None,
        plugin_ids: vec![],
        execution_admission: occ_worker::compute::ExecutionAdmission::standard(),
        sandbox_facets: Vec::new(),
        credential_sources: Vec::new(),
        workspace_setup: None,
        sandbox_driver_id: None,
        repository: None,
    }
}

/// The schema of the database at `url` as `pg_dump --schema-only` prints it, without the
/// lines that name the server version or vary per run.
pub fn schema_dump(url: &str) -> String {
    let pg_dump = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path().join("bin/pg_dump")))
        .filter(|p| p.exists())
        .max_by_key(|p| {
            let version = p.iter().rev().nth(2).and_then(|v| v.to_str()?.parse().ok());
            version.unwrap_or(0u32)
        })
        .unwrap_or_else(|| std::path::PathBuf::from("pg_dump"));
    let out = std::process::Command::new(&pg_dump)
        .args(["--schema-only", "--no-owner", "--no-privileges", url])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", pg_dump.display()));
    assert!(
        out.status.success(),
        "{}: {}",
        pg_dump.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8 dump")
        .lines()
        .filter(|l| {
            !(l.starts_with("\\restrict")
                || l.starts_with("\\unrestrict")
                || l.starts_with("-- Dumped from")
                || l.starts_with("-- Dumped by"))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}
