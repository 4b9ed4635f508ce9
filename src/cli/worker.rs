//! `occ-worker run` and `check`: start-up checks (SPEC W8) and the worker.

use super::error::CliError;
use super::globals::Globals;
use clap::Args;
use occ_worker::cancel::CancelToken;
use occ_worker::compute::kubernetes::{
    client::Client, connection, settings::Settings, KubernetesDriver,
};
use occ_worker::compute::{docker::DockerDriver, ComputeDriver};
use occ_worker::config::{Config, DriverKind, Mode};
use occ_worker::db::error_chain;
use occ_worker::events::Events;
use occ_worker::health::{HealthOptions, HealthServer};
use occ_worker::installation::Installation;
use occ_worker::metrics::Metrics;
use occ_worker::queue::QueueOptions;
use occ_worker::reconcile::{Context, Registry};
use occ_worker::repository::RepositorySender;
use occ_worker::runtime::budget::{self, ConnectionBudget, ServerLimit};
use occ_worker::runtime::{RuntimeOptions, Worker};
use occ_worker::secret::SecretDriver;
use serde_json::json;
use std::sync::Arc;

const INSTALLATION_READ: &str = include_str!("../../sql/queries/installation_read.sql");

#[derive(Args)]
pub struct RunArgs {
    /// Test tooling: replace every reconciler (noop | probe). Only in builds with the
    /// `test-tooling` feature, never in the shipped binary.
    #[cfg(feature = "test-tooling")]
    #[arg(long, hide = true, value_enum)]
    test_reconciler: Option<TestReconciler>,
}

/// The test reconcilers `run --test-reconciler` selects (test tooling).
#[cfg(feature = "test-tooling")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum TestReconciler {
    Noop,
    Probe,
}

impl RunArgs {
    #[cfg(feature = "test-tooling")]
    fn test_reconciler(&self) -> Option<TestReconciler> {
        self.test_reconciler
    }
}

/// Everything start-up checks, in order: configuration, database, Installation, Compute.
struct Started {
    config: Config,
    pool: occ_worker::db::Pool,
    installation_id: String,
    compute: Arc<dyn ComputeDriver>,
    events: Events,
    /// The Installation configuration file's selections (`OCC_INSTALLATION_CONFIG`).
    installation: Installation,
    /// The database's schema version and the window it declares (inside this binary's).
    schema: occ_worker::migrate::SchemaVersion,
    /// The codes of the Compute preflight's warnings (logged; `check` fails on any).
    preflight_warnings: Vec<String>,
    /// The selected native repository sender's client (SPEC G6, G20).
    repository_sender: Option<Arc<RepositorySender>>,
    /// Bounds every database wait of this process (W5). Last, so it outlives the pool when
    /// `Started` drops: closing the pool's connections is bounded by it too.
    _watchdog: Option<occ_worker::db::Watchdog>,
}

fn start(globals: &Globals) -> Result<Started, CliError> {
    let config = Config::from_lookup(|name| {
        if name == "OCC_DATABASE_URL" {
            globals.database_url.clone()
        } else {
            std::env::var(name).ok()
        }
    })
    .map_err(|e| CliError::config(e.to_string()))?;
    let events = Events::stdout(config.log_format);
    // First, so even start-up's own statements cannot wait past the database timeout.
    let watchdog = occ_worker::db::Watchdog::start(&config.database_url, config.db_timeout)
        .map_err(|e| {
            CliError::config(format!(
                "invalid configuration: OCC_DATABASE_URL: {}",
                error_chain(&e)
            ))
        })?;
    let budget = check_connection_budget(globals, &config, &events)?;
    let pool = open_pool(globals, &config, budget)?;
    let schema = check_schema(&pool)?;
    let installation_id = read_installation(&pool, &config)?;
    validate_iam(&pool)?;
    let (compute, installation) = build_compute(&config)?;
    let repository_sender = repository_sender(&installation, &installation_id)?;
    let preflight_warnings = preflight(&config, &*compute, &installation, &events)?;
    Ok(Started {
        _watchdog: watchdog,
        config,
        pool,
        installation_id,
        compute,
        events,
        installation,
        schema,
        preflight_warnings,
        repository_sender,
    })
}

/// The selected repository sender's client (SPEC G6), built where the hooks' are: a CA bundle
/// it cannot be built with stops start-up in one line naming the variable.
fn repository_sender(
    installation: &Installation,
    installation_id: &str,
) -> Result<Option<Arc<RepositorySender>>, CliError> {
    installation
        .repository_sender
        .as_ref()
        .map(|entry| {
            RepositorySender::new(entry, installation_id)
                .map(Arc::new)
                .map_err(|e| {
                    CliError::config(format!(
                        "invalid configuration: {}: {e}",
                        occ_worker::installation::VARIABLE
                    ))
                })
        })
        .transpose()
}

/// One direct connection first: a missing database, a refused login or a closed port is
/// reported at once with the address, instead of after the pool's connection timeout. It also
/// checks the connection budget before the pool takes any of it.
fn check_connection_budget(
    globals: &Globals,
    config: &Config,
    events: &Events,
) -> Result<ConnectionBudget, CliError> {
    let budget = ConnectionBudget::new(config.concurrency);
    let mut direct = globals.connect_to(&config.database_url, config.db_timeout)?;
    let limit = ServerLimit::read(&mut direct).map_err(|e| {
        CliError::new(format!(
            "cannot read the server's connection limit: {}",
            error_chain(&e)
        ))
    })?;
    budget::check(budget, limit)
        .map_err(|e| CliError::config(format!("invalid configuration: {e}")))?;
    if budget.total() > limit.free() {
        events.emit(
            "worker.connection-budget-warning",
            json!({
                "needed": budget.total(), "free": limit.free(), "inUse": limit.in_use,
                "maxConnections": limit.max_connections, "reserved": limit.reserved,
            }),
        );
    }
    Ok(budget)
}

/// The worker's pool, or where the database could not be reached and after how long.
fn open_pool(
    globals: &Globals,
    config: &Config,
    budget: ConnectionBudget,
) -> Result<occ_worker::db::Pool, CliError> {
    occ_worker::db::pool(&config.database_url, config.db_timeout, budget.pool_size()).map_err(|e| {
        let target = occ_worker::db::config(&config.database_url, config.db_timeout)
            .map(|(c, _)| occ_worker::db::describe(&c))
            .unwrap_or_default();
        CliError::new(format!(
            "database unreachable at {target} after {} ms ({}): {}",
            config.db_timeout.as_millis(),
            globals.database_url_source(),
            error_chain(&e)
        ))
    })
}

/// The database's schema is inside this binary's window (docs/operating.md, "Upgrading"):
/// every migration it embeds applied, and not contracted past it by a newer release. Outside,
/// one line naming both versions and what to run, exit 2.
fn check_schema(
    pool: &occ_worker::db::Pool,
) -> Result<occ_worker::migrate::SchemaVersion, CliError> {
    let mut client = pool
        .get()
        .map_err(|e| CliError::new(format!("database unreachable: {}", error_chain(&e))))?;
    let schema = occ_worker::migrate::read_schema(&mut client).map_err(|e| {
        CliError::new(format!(
            "cannot read the schema version: {}",
            error_chain(&e)
        ))
    })?;
    let Some(schema) = schema else {
        return Err(CliError::new(
            "the database has no occ schema: run `occ-worker migrate` first",
        ));
    };
    occ_worker::migrate::check_window(schema, occ_worker::migrate::newest_known())
        .map_err(|outside| CliError::config(outside.to_string()))?;
    Ok(schema)
}

/// The Installation's id, once its Secret Driver is this worker's (SPEC Z4).
fn read_installation(pool: &occ_worker::db::Pool, config: &Config) -> Result<String, CliError> {
    let mut client = pool
        .get()
        .map_err(|e| CliError::new(format!("database unreachable: {}", error_chain(&e))))?;
    let rows = client.query(INSTALLATION_READ, &[]).map_err(|e| {
        if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) {
            CliError::new("the database has no occ schema: run `occ-worker migrate` first")
        } else {
            CliError::new(format!(
                "cannot read the Installation: {}",
                super::admin::db_message(&e)
            ))
        }
    })?;
    let Some(row) = rows.first() else {
        return Err(CliError::new(
            "no Installation: run `occ-worker bootstrap --installation ID --admin IDENTITY` first",
        ));
    };
    let selected: Option<String> = row.get(1);
    SecretDriver::reference(&config.secret_driver)
        .check_selected(selected.as_deref())
        .map_err(|e| CliError::config(e.to_string()))?;
    Ok(row.get::<_, String>(0))
}

/// SPEC W8: the persisted IAM state decodes, row by row, before anything is claimed; the first
/// row that does not stops start-up naming it.
fn validate_iam(pool: &occ_worker::db::Pool) -> Result<(), CliError> {
    let mut client = pool
        .get()
        .map_err(|e| CliError::new(format!("database unreachable: {}", error_chain(&e))))?;
    occ_worker::iam::validate(&mut *client)
        .map_err(|e| CliError::new(format!("the persisted IAM state is invalid: {e}")))
}

/// The Compute Driver built whole: its own settings first, each failure one line naming its
/// variable, then the Installation's hooks (SPEC H1, H2) and the Sandbox Driver it enforces
/// (SPEC S1), checked against the Installation.
fn build_compute(config: &Config) -> Result<(Arc<dyn ComputeDriver>, Installation), CliError> {
    let driver = match config.compute_driver {
        DriverKind::Docker => Driver::Docker(
            DockerDriver::new(&config.docker_host)
                .map_err(|e| CliError::config(format!("invalid configuration: DOCKER_HOST: {e}")))?
                .with_subnet_pool(config.docker_subnet_pool)
                .with_request_timeout(config.compute_request_timeout),
        ),
        DriverKind::Kubernetes => Driver::Kubernetes(Box::new(kubernetes_driver(config)?)),
    };
    let installation = match &config.installation_config {
        Some(path) => Installation::load(path, config.compute_driver).map_err(|e| {
            CliError::config_lines(
                e.to_string()
                    .lines()
                    .map(|line| format!("invalid configuration: {line}")),
            )
        })?,
        None => Installation::default(),
    };
    let invalid = |e: String| CliError::config(format!("invalid configuration: {e}"));
    let hooks = installation.lifecycle_hooks().map_err(invalid)?;
    let compute: Arc<dyn ComputeDriver> = match driver {
        Driver::Docker(docker) => Arc::new(docker.with_lifecycle_hooks(hooks)),
        Driver::Kubernetes(kubernetes) => Arc::new(
            kubernetes
                .with_lifecycle_hooks(hooks)
                .with_sandbox(installation.sandbox.clone()),
        ),
    };
    installation.check_compute(&*compute).map_err(invalid)?;
    Ok((compute, installation))
}

/// The Compute Driver's preflight, before anything is claimed. W8: its warnings are logged and
/// the worker starts, in production too (a verb denied now may be granted a moment later, and
/// the passes that need it retry within their budget); `check` fails on any warning, so an
/// operator's gate still stops a bad install.
fn preflight(
    config: &Config,
    compute: &dyn ComputeDriver,
    installation: &Installation,
    events: &Events,
) -> Result<Vec<String>, CliError> {
    let warnings = compute.preflight(&CancelToken::unbounded()).map_err(|e| {
        let target = match config.compute_driver {
            DriverKind::Docker => format!(" (Docker Engine at DOCKER_HOST={})", config.docker_host),
            DriverKind::Kubernetes => String::new(),
        };
        CliError::new(format!(
            "compute preflight failed{target}: {e}{}",
            what_is_missing(&e, installation)
        ))
    })?;
    let codes: Vec<String> = warnings.into_iter().map(|w| w.code).collect();
    for code in &codes {
        events.emit(
            "compute.preflight-warning",
            json!({"computeDriverId": compute.id(), "code": code}),
        );
    }
    Ok(codes)
}

/// What a preflight refusal's code says is missing, named as the operator configured it: the
/// RuntimeClass the Installation file asked for (SPEC S1).
fn what_is_missing(e: &occ_worker::compute::ComputeError, installation: &Installation) -> String {
    use occ_worker::compute::ComputeErrorKind;
    let runtime_class = installation
        .sandbox
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref());
    match (e.kind(), runtime_class) {
        (ComputeErrorKind::Permanent(code), Some(name))
            if code == "SANDBOX_RUNTIME_CLASS_NOT_FOUND" =>
        {
            format!(
                ": the RuntimeClass {name} (sandbox.runtimeClassName in OCC_INSTALLATION_CONFIG) \
                 does not exist in the cluster (kubectl get runtimeclass)"
            )
        }
        _ => String::new(),
    }
}

/// A Compute Driver whose own settings are read, before the Installation's selections it is
/// built with.
enum Driver {
    Docker(DockerDriver),
    Kubernetes(Box<KubernetesDriver>),
}

/// The Kubernetes driver: its settings file, then the API server connection (in-cluster or
/// kubeconfig). Each failure is one line naming the variable.
fn kubernetes_driver(config: &Config) -> Result<KubernetesDriver, CliError> {
    let path = config.kubernetes_config.as_deref().ok_or_else(|| {
        CliError::config("invalid configuration: OCC_KUBERNETES_CONFIG is required")
    })?;
    let settings = Settings::load(path)
        .map_err(|e| CliError::config(format!("invalid configuration: {e}")))?;
    let connection = connection::discover(
        |name| std::env::var(name).ok(),
        config.kubernetes_context.as_deref(),
    )
    .map_err(|e| CliError::config(format!("invalid configuration: {e}")))?;
    let client = Client::new(connection)
        .map_err(|e| CliError::config(format!("invalid configuration: {e}")))?
        .with_request_timeout(config.compute_request_timeout);
    Ok(KubernetesDriver::new(client, settings)
        .with_convergence_timeout(config.convergence_timeout)
        .with_production(config.mode == Mode::Production))
}

/// `check`: start-up's checks, then one call to each configured lifecycle hook (SPEC H1): a
/// line on stderr per hook without a valid answer, which fails `check` in production (in
/// development it is a warning: the hook may come up after the worker).
pub fn check(globals: &Globals) -> Result<(), CliError> {
    let s = start(globals)?;
    let hooks = s
        .installation
        .lifecycle_hooks()
        .map_err(|e| CliError::config(format!("invalid configuration: {e}")))?
        .check(&s.installation_id, s.compute.id());
    let unanswered: Vec<String> = hooks
        .iter()
        .filter_map(|h| {
            h.problem.as_ref().map(|problem| {
                format!(
                    "lifecycle hook {} at {} {problem} (LIFECYCLE_HOOK_UNAVAILABLE)",
                    h.driver.as_str(),
                    h.url
                )
            })
        })
        .collect();
    let warned = !s.preflight_warnings.is_empty() || !unanswered.is_empty();
    globals.print(&json!({
        "status": if warned { "warnings" } else { "ok" },
        "installation": s.installation_id,
        "computeDriver": s.compute.id(),
        "secretDriver": s.config.secret_driver,
        "mode": format!("{:?}", s.config.mode).to_lowercase(),
        "schema": {"version": s.schema.version, "compatibleSince": s.schema.compatible_since,
                   "knows": occ_worker::migrate::newest_known(),
                   "oldestSupported": occ_worker::migrate::OLDEST_SUPPORTED},
        "lifecycleHooks": s.installation.lifecycle_hooks.iter().zip(&hooks)
            .map(|(h, checked)| json!({"driver": h.driver.as_str(), "url": h.url,
                "phases": h.phases.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
                "answered": checked.problem.is_none()}))
            .collect::<Vec<_>>(),
        "sandboxDriverId": s.installation.sandbox.as_ref().map(|s| &s.id),
        "credentialGatewayId": s.installation.credential_gateway.as_ref().map(|g| &g.id),
        "repositorySenderId": s.installation.repository_sender.as_ref().map(|r| &r.id),
        "preflightWarnings": s.preflight_warnings,
    }));
    let production = s.config.mode == Mode::Production;
    if !production {
        for line in &unanswered {
            eprintln!("occ-worker: warning: {line}");
        }
    }
    let mut failures = Vec::new();
    if production {
        failures.extend(unanswered);
    }
    if !s.preflight_warnings.is_empty() {
        failures.push(format!(
            "compute preflight warnings: {} (`run` starts anyway and logs them)",
            s.preflight_warnings.join(", ")
        ));
    }
    match failures.len() {
        0 => Ok(()),
        _ => Err(CliError::lines(failures)),
    }
}

/// The worker's reconcilers: every production one, or under test tooling one test reconciler
/// for every operation.
#[cfg(not(feature = "test-tooling"))]
fn registry(_args: &RunArgs) -> Registry {
    occ_worker::reconcile::registry::production()
}

/// The worker's reconcilers: every production one, or under test tooling one test reconciler
/// for every operation.
#[cfg(feature = "test-tooling")]
fn registry(args: &RunArgs) -> Registry {
    use occ_worker::queue::Operation;
    use occ_worker::reconcile::{probe, DynReconciler};
    let all = |r: Arc<dyn DynReconciler>| {
        Operation::ALL
            .into_iter()
            .fold(Registry::new(), |reg, op| reg.with(op, r.clone()))
    };
    match args.test_reconciler() {
        None => occ_worker::reconcile::registry::production(),
        Some(TestReconciler::Noop) => all(Arc::new(probe::Noop)),
        Some(TestReconciler::Probe) => {
            let hold = std::env::var("OCC_TEST_PROBE_HOLD_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(5);
            all(Arc::new(probe::Probe {
                hold: std::time::Duration::from_millis(hold),
            }))
        }
    }
}

/// The worker's logger without the targets that are never logged (events::NEVER_LOGGED).
struct Redacted(env_logger::Logger);

impl log::Log for Redacted {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        occ_worker::events::log_target_allowed(metadata.target()) && self.0.enabled(metadata)
    }
    fn log(&self, record: &log::Record) {
        if occ_worker::events::log_target_allowed(record.target()) {
            self.0.log(record);
        }
    }
    fn flush(&self) {
        self.0.flush();
    }
}

/// The log filter when `RUST_LOG` is unset (`reference::LOG` lists it in `run --help`).
pub const DEFAULT_LOG_FILTER: &str = "warn,r2d2=off";

pub fn run(globals: &Globals, args: RunArgs) -> Result<(), CliError> {
    // r2d2 logs every failed connection attempt with the driver's free text; the worker
    // reports database trouble itself (one start-up line, `worker.error` events), so its
    // logger stays off.
    // Whatever RUST_LOG says, the targets that would echo a request, an answer or a header
    // are dropped (events::NEVER_LOGGED).
    let logger = env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or(DEFAULT_LOG_FILTER),
    )
    .target(env_logger::Target::Stderr)
    .build();
    let level = logger.filter();
    if log::set_boxed_logger(Box::new(Redacted(logger))).is_ok() {
        log::set_max_level(level);
    }
    // Handlers first: a SIGTERM during start-up is held until the worker runs, which then
    // stops at once and exits 0 instead of dying by the signal's default action (W4).
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    let s = start(globals)?;
    let registry = registry(&args);
    #[cfg(feature = "test-tooling")]
    if args.test_reconciler() == Some(TestReconciler::Probe) {
        let mut client = s.pool.get()?;
        occ_worker::reconcile::probe::Probe::setup(&mut client)?;
    }
    let metrics = Metrics::new();
    let ctx = Arc::new(Context {
        pool: s.pool.clone(),
        compute: s.compute,
        installation_id: s.installation_id,
        queue: QueueOptions::new(s.config.lease, s.config.max_attempts),
        convergence_timeout: s.config.convergence_timeout,
        events: s.events.clone(),
        metrics: metrics.clone(),
        sandbox: s.installation.sandbox_selection(),
        credential_gateway: s
            .installation
            .credential_gateway
            .as_ref()
            .map(|g| g.id.clone()),
        mode: s.config.mode,
        repository_sender: s.repository_sender.clone(),
    });
    let worker = Worker::new(
        ctx,
        registry,
        RuntimeOptions {
            concurrency: s.config.concurrency,
            poll_interval: s.config.poll_interval,
            shutdown_grace: s.config.shutdown_grace,
            listen_url: Some(s.config.database_url.clone()),
            db_timeout: s.config.db_timeout,
        },
    );
    // One loop round may hold a few bounded database waits (check-out, claim, recovery) during
    // a stall; liveness must not fail for an outage a restart cannot fix.
    let stale_after = (s.config.poll_interval * 20).max(s.config.db_timeout * 5);
    let _health = HealthServer::start(
        s.config.http_addr,
        s.pool.clone(),
        metrics,
        worker.progress.clone(),
        HealthOptions {
            stale_after,
            db_timeout: s.config.db_timeout,
        },
        s.events.clone(),
    )
    .map_err(|e| CliError::config(format!("invalid configuration: OCC_WORKER_HTTP_ADDR: {e}")))?;
    let signal_handle = signals.handle();
    let stop = worker.stop_handle();
    let signal_thread = std::thread::Builder::new()
        .name("occ-signal".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                stop.stop();
            }
        })?;
    let ran = worker.run();
    // Only goodbyes are left: closing a connection to a silent server must not wait.
    occ_worker::db::closing();
    ran?;
    signal_handle.close();
    let _ = signal_thread.join();
    Ok(())
}
