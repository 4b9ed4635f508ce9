//! Worker configuration from the environment (SPEC section 8).
//!
//! Owns parsing and validation only: every bad value stops start-up with an error that names
//! the variable. It never reads the environment itself; callers pass a lookup so tests can
//! supply their own.

use crate::compute::SubnetPool;
use crate::variable::{Unset, Variable};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// development or production (SPEC W8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Development,
    Production,
}

/// The explicitly selected Compute Driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverKind {
    Docker,
    Kubernetes,
}

impl DriverKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DriverKind::Docker => "docker",
            DriverKind::Kubernetes => "kubernetes",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub database_url: String,
    pub mode: Mode,
    pub compute_driver: DriverKind,
    pub concurrency: usize,
    pub lease: Duration,
    pub poll_interval: Duration,
    pub max_attempts: i32,
    pub convergence_timeout: Duration,
    pub db_timeout: Duration,
    pub shutdown_grace: Duration,
    /// The upper bound of one Compute Driver request (`OCC_COMPUTE_REQUEST_TIMEOUT_MS`); the
    /// heartbeat keeps the claim meanwhile and a lost claim interrupts the request (W2, W3).
    pub compute_request_timeout: Duration,
    pub http_addr: SocketAddr,
    pub docker_host: String,
    /// Where the Docker driver takes Namespace network subnets (`OCC_DOCKER_SUBNET_POOL`).
    pub docker_subnet_pool: SubnetPool,
    /// The Kubernetes driver file (`OCC_KUBERNETES_CONFIG`), required for that driver.
    pub kubernetes_config: Option<std::path::PathBuf>,
    /// The kubeconfig context (`OCC_KUBERNETES_CONTEXT`); the current context when absent.
    pub kubernetes_context: Option<String>,
    /// The Installation configuration file (`OCC_INSTALLATION_CONFIG`, `installation`):
    /// nothing selected when absent.
    pub installation_config: Option<std::path::PathBuf>,
    /// The Secret Driver this worker provides (`OCC_SECRET_DRIVER`, SPEC Z4); start-up checks
    /// it is the one the Installation selects.
    pub secret_driver: String,
    /// How event lines are written (`OCC_LOG_FORMAT`); none: JSON, or text on a terminal.
    pub log_format: Option<crate::events::Format>,
}

/// Every variable `Config::from_lookup` reads, in the order `run --help` lists them: the one
/// table of them. `from_lookup` takes each default from here and panics on a name it does not
/// list; the operator CLI prints it in `run --help`, `check --help` and the man page, and
/// `docs/operating.md` describes each at length.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "OCC_DATABASE_URL",
        unset: Unset::Required,
        help: "PostgreSQL connection string (--database-url overrides it); sslmode and sslrootcert as in libpq",
    },
    Variable {
        name: "OCC_COMPUTE_DRIVER",
        unset: Unset::Required,
        help: "The Compute Driver: docker (development) or kubernetes",
    },
    Variable {
        name: "OCC_WORKER_MODE",
        unset: Unset::Default("development"),
        help: "Development or production; production needs the settings marked so set explicitly, the kubernetes driver and TLS to a remote database",
    },
    Variable {
        name: "OCC_WORKER_CONCURRENCY",
        unset: Unset::Default("8"),
        help: "Worker threads, at most 1024 (set explicitly in production)",
    },
    Variable {
        name: "OCC_WORKER_LEASE_MS",
        unset: Unset::Default("5000"),
        help: "Claim lease, at most 3600000 (set explicitly in production)",
    },
    Variable {
        name: "OCC_WORKER_POLL_INTERVAL_MS",
        unset: Unset::Default("250"),
        help: "Fallback poll when idle (LISTEN/NOTIFY wakes the worker first)",
    },
    Variable {
        name: "OCC_WORKER_MAX_ATTEMPTS",
        unset: Unset::Default("5"),
        help: "Failure budget per work (set explicitly in production)",
    },
    Variable {
        name: "OCC_WORKER_CONVERGENCE_TIMEOUT_MS",
        unset: Unset::Default("900000"),
        help: "Pending deadline from creation (database clock)",
    },
    Variable {
        name: "OCC_WORKER_DB_TIMEOUT_MS",
        unset: Unset::Default("10000"),
        help: "Connect and statement timeout, and the bound on every database wait",
    },
    Variable {
        name: "OCC_WORKER_SHUTDOWN_GRACE_MS",
        unset: Unset::Default("10000"),
        help: "Drain time on SIGTERM or SIGINT",
    },
    Variable {
        name: "OCC_COMPUTE_REQUEST_TIMEOUT_MS",
        unset: Unset::Default("30000"),
        help: "Upper bound of one Docker or Kubernetes API request",
    },
    Variable {
        name: "OCC_WORKER_HTTP_ADDR",
        unset: Unset::Default("127.0.0.1:9464"),
        help: "HOST:PORT of /livez, /readyz and /metrics (set explicitly in production)",
    },
    Variable {
        name: "OCC_SECRET_DRIVER",
        unset: Unset::Default(crate::secret::DEFAULT_SECRET_DRIVER),
        help: "The Secret Driver this worker provides; must be the one the Installation selects",
    },
    Variable {
        name: "DOCKER_HOST",
        unset: Unset::Default("unix:///var/run/docker.sock"),
        help: "The Docker Engine's socket (docker driver; unix:// only)",
    },
    Variable {
        name: "OCC_DOCKER_SUBNET_POOL",
        unset: Unset::Default(SubnetPool::DEFAULT),
        help: "POOL_CIDR:SUBNET_PREFIX the Docker driver takes Namespace network subnets from",
    },
    Variable {
        name: "OCC_KUBERNETES_CONFIG",
        unset: Unset::RequiredWhen("with OCC_COMPUTE_DRIVER=kubernetes"),
        help: "The Kubernetes driver file (JSON, docs/kubernetes.md)",
    },
    Variable {
        name: "OCC_KUBERNETES_CONTEXT",
        unset: Unset::Means("the kubeconfig's current context"),
        help: "The kubeconfig context to use",
    },
    Variable {
        name: "OCC_INSTALLATION_CONFIG",
        unset: Unset::Means("no lifecycle hook, Sandbox Driver or Credential Gateway selected"),
        help: "The Installation configuration file (JSON: lifecycleHooks, sandbox, sandboxNetworkPolicyCeiling, credentialGateway; docs/operating.md)",
    },
    Variable {
        name: "OCC_LOG_FORMAT",
        unset: Unset::Means("text when stdout is a terminal, json otherwise"),
        help: "How event lines are written: json (one object per line) or text (a time, the event and its fields, worker.health only when it changes)",
    },
];

/// The table's entry for `name`. Reading a variable the table does not list is a bug, so it
/// cannot be read without being documented.
fn variable(name: &str) -> &'static Variable {
    VARIABLES
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("{name} is read but not listed in config::VARIABLES"))
}

/// The value `name` takes when unset, from the table.
pub fn default_of(name: &str) -> Option<&'static str> {
    match variable(name).unset {
        Unset::Default(value) => Some(value),
        _ => None,
    }
}

/// A configuration error naming the variable at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub variable: &'static str,
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid configuration: {} {}",
            self.variable, self.problem
        )
    }
}

impl std::error::Error for ConfigError {}

fn err(variable: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        variable,
        problem: problem.into(),
    }
}

/// Whether every host of a connection string is a Unix socket or a loopback address.
fn local_only(url: &str) -> bool {
    let Ok(config) = url.parse::<postgres::Config>() else {
        return false;
    };
    let loopback = |host: &str| {
        host == "localhost"
            || host
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    };
    !config.get_hosts().is_empty()
        && config.get_hosts().iter().all(|h| match h {
            postgres::config::Host::Tcp(name) => loopback(name),
            postgres::config::Host::Unix(_) => true,
        })
        && config.get_hostaddrs().iter().all(|ip| ip.is_loopback())
}

impl Config {
    /// Reads the configuration through `lookup` (usually `std::env::var`). The steps run in
    /// this order, so the first variable at fault is the one named.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let env = Env(lookup);
        let mode = env.mode()?;
        let database_url = env.database_url()?;
        let compute_driver = env.compute_driver()?;
        if mode == Mode::Production {
            env.production_requirements(compute_driver)?;
        }
        env.database_tls(mode, &database_url)?;
        let (concurrency, max_attempts) = env.pool_limits()?;
        let http_addr = env.http_addr()?;
        let docker_host = env.docker_host(compute_driver)?;
        let kubernetes_config = env.kubernetes_config(compute_driver)?;
        let kubernetes_context = env
            .get("OCC_KUBERNETES_CONTEXT")
            .map(|c| c.trim().to_string());
        let installation_config = env
            .get("OCC_INSTALLATION_CONFIG")
            .map(std::path::PathBuf::from);
        let docker_subnet_pool = env.docker_subnet_pool()?;
        let secret_driver = env.secret_driver()?;
        let lease = env.lease()?;
        let log_format = env.log_format()?;
        let millis = |name| env.positive(name).map(Duration::from_millis);
        Ok(Config {
            database_url,
            mode,
            compute_driver,
            concurrency,
            lease,
            poll_interval: millis("OCC_WORKER_POLL_INTERVAL_MS")?,
            max_attempts,
            convergence_timeout: millis("OCC_WORKER_CONVERGENCE_TIMEOUT_MS")?,
            db_timeout: millis("OCC_WORKER_DB_TIMEOUT_MS")?,
            shutdown_grace: millis("OCC_WORKER_SHUTDOWN_GRACE_MS")?,
            compute_request_timeout: millis("OCC_COMPUTE_REQUEST_TIMEOUT_MS")?,
            http_addr,
            docker_host,
            docker_subnet_pool,
            kubernetes_config,
            kubernetes_context,
            installation_config,
            secret_driver,
            log_format,
        })
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }
}

/// The environment as `Config::from_lookup` reads it, one step per variable or group of
/// variables. A blank value counts as unset, and every variable read must be in `VARIABLES`.
struct Env<F: Fn(&str) -> Option<String>>(F);

impl<F: Fn(&str) -> Option<String>> Env<F> {
    /// The value as set, if it is.
    fn get(&self, name: &str) -> Option<String> {
        variable(name);
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// The value, or the table's default.
    fn value(&self, name: &str) -> Option<String> {
        self.get(name)
            .or_else(|| default_of(name).map(String::from))
    }

    /// A positive integer, or the table's default.
    fn positive(&self, name: &'static str) -> Result<u64, ConfigError> {
        match self.get(name) {
            None => Ok(default_of(name)
                .and_then(|d| d.parse().ok())
                .expect("a numeric variable has a numeric default in config::VARIABLES")),
            Some(raw) => match raw.trim().parse::<u64>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(err(
                    name,
                    format!("must be a positive integer, got {raw:?}"),
                )),
            },
        }
    }

    fn mode(&self) -> Result<Mode, ConfigError> {
        match self.value("OCC_WORKER_MODE").unwrap_or_default().trim() {
            "development" => Ok(Mode::Development),
            "production" => Ok(Mode::Production),
            other => Err(err(
                "OCC_WORKER_MODE",
                format!("must be development or production, got {other:?}"),
            )),
        }
    }

    fn database_url(&self) -> Result<String, ConfigError> {
        self.get("OCC_DATABASE_URL").ok_or_else(|| {
            err(
                "OCC_DATABASE_URL",
                "is required (a PostgreSQL connection string)",
            )
        })
    }

    fn compute_driver(&self) -> Result<DriverKind, ConfigError> {
        match self.get("OCC_COMPUTE_DRIVER").as_deref().map(str::trim) {
            None => Err(err(
                "OCC_COMPUTE_DRIVER",
                "is required: select docker or kubernetes explicitly",
            )),
            Some("docker") => Ok(DriverKind::Docker),
            Some("kubernetes") => Ok(DriverKind::Kubernetes),
            Some(other) => Err(err(
                "OCC_COMPUTE_DRIVER",
                format!("must be docker or kubernetes, got {other:?}"),
            )),
        }
    }

    /// Production needs every operational setting stated, not defaulted, and the Kubernetes
    /// driver.
    fn production_requirements(&self, compute_driver: DriverKind) -> Result<(), ConfigError> {
        for name in [
            "OCC_WORKER_CONCURRENCY",
            "OCC_WORKER_LEASE_MS",
            "OCC_WORKER_MAX_ATTEMPTS",
            "OCC_WORKER_HTTP_ADDR",
        ] {
            if self.get(name).is_none() {
                return Err(err(name, "must be set explicitly in production mode"));
            }
        }
        if compute_driver == DriverKind::Docker {
            return Err(err(
                "OCC_COMPUTE_DRIVER",
                "docker is the development driver; production requires kubernetes",
            ));
        }
        Ok(())
    }

    /// The URL's TLS settings are valid, and production never talks to a remote database in
    /// plaintext: `disable` (and `prefer`, the default, which falls back to plaintext) only
    /// for a loopback host or a Unix socket.
    fn database_tls(&self, mode: Mode, database_url: &str) -> Result<(), ConfigError> {
        let (rest, tls) =
            crate::db::tls::split(database_url).map_err(|p| err("OCC_DATABASE_URL", p))?;
        if mode == Mode::Production && tls.mode.allows_plaintext() && !local_only(&rest) {
            return Err(err(
                "OCC_DATABASE_URL",
                "needs sslmode=require, verify-ca or verify-full in production mode (plaintext only to a loopback host or a Unix socket)",
            ));
        }
        Ok(())
    }

    /// The pool's size and the attempt budget.
    fn pool_limits(&self) -> Result<(usize, i32), ConfigError> {
        let concurrency = self.positive("OCC_WORKER_CONCURRENCY")?;
        if concurrency > 1024 {
            return Err(err("OCC_WORKER_CONCURRENCY", "must be at most 1024"));
        }
        let max_attempts = self.positive("OCC_WORKER_MAX_ATTEMPTS")?;
        if max_attempts > i32::MAX as u64 {
            return Err(err("OCC_WORKER_MAX_ATTEMPTS", "is too large"));
        }
        Ok((concurrency as usize, max_attempts as i32))
    }

    fn http_addr(&self) -> Result<SocketAddr, ConfigError> {
        let http_raw = self.value("OCC_WORKER_HTTP_ADDR").unwrap_or_default();
        http_raw.trim().parse::<SocketAddr>().map_err(|_| {
            err(
                "OCC_WORKER_HTTP_ADDR",
                format!("must be HOST:PORT with a numeric address, got {http_raw:?}"),
            )
        })
    }

    fn docker_host(&self, compute_driver: DriverKind) -> Result<String, ConfigError> {
        let docker_host = self.value("DOCKER_HOST").unwrap_or_default();
        if compute_driver == DriverKind::Docker && !docker_host.starts_with("unix://") {
            return Err(err(
                "DOCKER_HOST",
                format!("must be a unix:// socket address, got {docker_host:?}"),
            ));
        }
        Ok(docker_host)
    }

    fn kubernetes_config(
        &self,
        compute_driver: DriverKind,
    ) -> Result<Option<std::path::PathBuf>, ConfigError> {
        let kubernetes_config = self
            .get("OCC_KUBERNETES_CONFIG")
            .map(std::path::PathBuf::from);
        if compute_driver == DriverKind::Kubernetes && kubernetes_config.is_none() {
            return Err(err(
                "OCC_KUBERNETES_CONFIG",
                "is required with OCC_COMPUTE_DRIVER=kubernetes (the driver settings file)",
            ));
        }
        Ok(kubernetes_config)
    }

    fn docker_subnet_pool(&self) -> Result<SubnetPool, ConfigError> {
        let pool_raw = self.value("OCC_DOCKER_SUBNET_POOL").unwrap_or_default();
        pool_raw.parse::<SubnetPool>().map_err(|problem| {
            err(
                "OCC_DOCKER_SUBNET_POOL",
                format!("{problem}, got {pool_raw:?}"),
            )
        })
    }

    fn secret_driver(&self) -> Result<String, ConfigError> {
        let secret_driver = self
            .value("OCC_SECRET_DRIVER")
            .map(|v| v.trim().to_string())
            .unwrap_or_default();
        let ident = |v: &str| {
            v.len() <= 63
                && v.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && v.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        };
        if !ident(&secret_driver) {
            return Err(err(
                "OCC_SECRET_DRIVER",
                format!("must be a Secret Driver id (lower-case letters, digits, - and _), got {secret_driver:?}"),
            ));
        }
        Ok(secret_driver)
    }

    /// The schema bounds a lease to one hour past its claim or renewal (V7).
    fn lease(&self) -> Result<Duration, ConfigError> {
        let lease_ms = self.positive("OCC_WORKER_LEASE_MS")?;
        if lease_ms > 3_600_000 {
            return Err(err(
                "OCC_WORKER_LEASE_MS",
                "must be at most 3600000 (one hour, the schema's bound on a lease)",
            ));
        }
        Ok(Duration::from_millis(lease_ms))
    }

    fn log_format(&self) -> Result<Option<crate::events::Format>, ConfigError> {
        match self.get("OCC_LOG_FORMAT").as_deref().map(str::trim) {
            None => Ok(None),
            Some("json") => Ok(Some(crate::events::Format::Json)),
            Some("text") => Ok(Some(crate::events::Format::Text)),
            Some(other) => Err(err(
                "OCC_LOG_FORMAT",
                format!("must be json or text, got {other:?}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_drivers_default_request_timeout_is_the_variables_default() {
        assert_eq!(
            default_of("OCC_COMPUTE_REQUEST_TIMEOUT_MS"),
            Some(
                crate::compute::DEFAULT_REQUEST_TIMEOUT
                    .as_millis()
                    .to_string()
                    .as_str()
            )
        );
    }

    fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    const BASE: [(&str, &str); 2] = [
        ("OCC_DATABASE_URL", "postgres://x"),
        ("OCC_COMPUTE_DRIVER", "docker"),
    ];

    #[test]
    fn defaults_follow_the_spec() {
        let c = with(&BASE).unwrap();
        assert_eq!(c.concurrency, 8);
        assert_eq!(c.lease, Duration::from_millis(5000));
        assert_eq!(c.poll_interval, Duration::from_millis(250));
        assert_eq!(c.max_attempts, 5);
        assert_eq!(c.convergence_timeout, Duration::from_millis(900_000));
        assert_eq!(c.db_timeout, Duration::from_millis(10_000));
        assert_eq!(c.shutdown_grace, Duration::from_millis(10_000));
        assert_eq!(c.compute_request_timeout, Duration::from_millis(30_000));
        assert_eq!(c.http_addr.to_string(), "127.0.0.1:9464");
        assert_eq!(c.mode, Mode::Development);
        assert_eq!(c.docker_subnet_pool.to_string(), "172.16.0.0/16:24");
    }

    #[test]
    fn every_variable_read_is_listed_and_every_listed_one_is_read() {
        let read = std::cell::RefCell::new(Vec::new());
        let env: HashMap<&str, &str> = [
            ("OCC_DATABASE_URL", "postgres://x"),
            ("OCC_COMPUTE_DRIVER", "kubernetes"),
            ("OCC_KUBERNETES_CONFIG", "/etc/occ/kubernetes.json"),
        ]
        .into();
        Config::from_lookup(|name| {
            read.borrow_mut().push(name.to_string());
            env.get(name).map(|v| v.to_string())
        })
        .unwrap();
        let mut read = read.into_inner();
        read.sort();
        read.dedup();
        let mut listed: Vec<String> = VARIABLES.iter().map(|v| v.name.to_string()).collect();
        listed.sort();
        assert_eq!(read, listed);
    }

    #[test]
    fn every_variable_is_described_in_the_operating_reference() {
        let reference = include_str!("../docs/operating.md");
        for v in VARIABLES {
            assert!(
                reference.contains(&format!("| `{}` |", v.name)),
                "{} is missing from the variable table of docs/operating.md",
                v.name
            );
        }
    }

    #[test]
    fn the_table_defaults_are_the_ones_used() {
        let c = with(&BASE).unwrap();
        assert_eq!(default_of("OCC_WORKER_MODE"), Some("development"));
        assert_eq!(
            default_of("OCC_DOCKER_SUBNET_POOL"),
            Some(c.docker_subnet_pool.to_string().as_str())
        );
        assert_eq!(
            default_of("OCC_WORKER_HTTP_ADDR"),
            Some(c.http_addr.to_string().as_str())
        );
        assert_eq!(
            default_of("OCC_SECRET_DRIVER"),
            Some(c.secret_driver.as_str())
        );
        assert_eq!(default_of("DOCKER_HOST"), Some(c.docker_host.as_str()));
        assert_eq!(default_of("OCC_DATABASE_URL"), None);
    }

    #[test]
    fn docker_subnet_pool_is_parsed() {
        let mut pairs = BASE.to_vec();
        pairs.push(("OCC_DOCKER_SUBNET_POOL", "10.88.0.0/20:28"));
        let c = with(&pairs).unwrap();
        assert_eq!(c.docker_subnet_pool.to_string(), "10.88.0.0/20:28");
        assert_eq!(c.docker_subnet_pool.capacity(), 256);
    }

    #[test]
    fn a_bad_docker_subnet_pool_names_the_variable() {
        for bad in [
            "172.16.0.0/16",
            "172.16.0.0/16:8",
            "172.16.0.0/16:31",
            "172.16.1.0/16:24",
            "10.0.0.0/8:30",
            "fd00::/48:64",
            "pool",
        ] {
            let mut pairs = BASE.to_vec();
            pairs.push(("OCC_DOCKER_SUBNET_POOL", bad));
            let e = with(&pairs).unwrap_err();
            assert_eq!(e.variable, "OCC_DOCKER_SUBNET_POOL", "{bad}");
            assert!(e.to_string().contains("OCC_DOCKER_SUBNET_POOL"), "{e}");
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn every_numeric_variable_must_be_positive() {
        for name in [
            "OCC_WORKER_CONCURRENCY",
            "OCC_WORKER_LEASE_MS",
            "OCC_WORKER_POLL_INTERVAL_MS",
            "OCC_WORKER_MAX_ATTEMPTS",
            "OCC_WORKER_CONVERGENCE_TIMEOUT_MS",
            "OCC_WORKER_DB_TIMEOUT_MS",
            "OCC_WORKER_SHUTDOWN_GRACE_MS",
            "OCC_COMPUTE_REQUEST_TIMEOUT_MS",
        ] {
            for bad in ["0", "-1", "abc", "1.5"] {
                let mut pairs = BASE.to_vec();
                pairs.push((name, bad));
                let e = with(&pairs).unwrap_err();
                assert_eq!(e.variable, name, "{name}={bad}");
                assert!(e.to_string().contains(name));
            }
        }
    }

    #[test]
    fn driver_must_be_selected_explicitly() {
        let e = with(&[("OCC_DATABASE_URL", "postgres://x")]).unwrap_err();
        assert_eq!(e.variable, "OCC_COMPUTE_DRIVER");
        let e = with(&[("OCC_DATABASE_URL", "x"), ("OCC_COMPUTE_DRIVER", "podman")]).unwrap_err();
        assert_eq!(e.variable, "OCC_COMPUTE_DRIVER");
    }

    #[test]
    fn unknown_mode_and_missing_url_are_named() {
        let mut pairs = BASE.to_vec();
        pairs.push(("OCC_WORKER_MODE", "staging"));
        assert_eq!(with(&pairs).unwrap_err().variable, "OCC_WORKER_MODE");
        let e = with(&[("OCC_COMPUTE_DRIVER", "docker")]).unwrap_err();
        assert_eq!(e.variable, "OCC_DATABASE_URL");
    }

    #[test]
    fn production_requires_explicit_settings() {
        let e = with(&[
            ("OCC_DATABASE_URL", "x"),
            ("OCC_COMPUTE_DRIVER", "kubernetes"),
            ("OCC_WORKER_MODE", "production"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "OCC_WORKER_CONCURRENCY");
    }

    #[test]
    fn a_lease_longer_than_the_schema_allows_is_refused() {
        let mut pairs = BASE.to_vec();
        pairs.push(("OCC_WORKER_LEASE_MS", "3600001"));
        assert_eq!(with(&pairs).unwrap_err().variable, "OCC_WORKER_LEASE_MS");
        pairs.pop();
        pairs.push(("OCC_WORKER_LEASE_MS", "3600000"));
        assert!(with(&pairs).is_ok());
    }

    #[test]
    fn production_refuses_plaintext_to_a_remote_database() {
        let production = |url: &str| {
            with(&[
                ("OCC_DATABASE_URL", url),
                ("OCC_COMPUTE_DRIVER", "kubernetes"),
                ("OCC_KUBERNETES_CONFIG", "/etc/occ/kubernetes.json"),
                ("OCC_WORKER_MODE", "production"),
                ("OCC_WORKER_CONCURRENCY", "4"),
                ("OCC_WORKER_LEASE_MS", "5000"),
                ("OCC_WORKER_MAX_ATTEMPTS", "5"),
                ("OCC_WORKER_HTTP_ADDR", "0.0.0.0:9464"),
            ])
        };
        for url in [
            "postgres://occ@db.example/occ?sslmode=disable",
            "postgres://occ@db.example/occ",
            "postgres://occ@10.0.0.5/occ?sslmode=prefer",
        ] {
            let e = production(url).unwrap_err();
            assert_eq!(e.variable, "OCC_DATABASE_URL", "{url}");
            assert!(e.problem.contains("sslmode"), "{url}: {e}");
        }
        for url in [
            "postgres://occ@127.0.0.1/occ?sslmode=disable",
            "postgres://occ@localhost/occ?sslmode=disable",
            "host=/var/run/postgresql user=occ sslmode=disable",
            "postgres://occ@db.example/occ?sslmode=require",
            "postgres://occ@db.example/occ?sslmode=verify-full&sslrootcert=/etc/ca.pem",
        ] {
            assert!(production(url).is_ok(), "{url}");
        }
        let e = with(&[
            ("OCC_DATABASE_URL", "postgres://occ@db/occ?sslmode=allow"),
            ("OCC_COMPUTE_DRIVER", "docker"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "OCC_DATABASE_URL");
    }

    #[test]
    fn kubernetes_requires_its_settings_file() {
        let e = with(&[
            ("OCC_DATABASE_URL", "x"),
            ("OCC_COMPUTE_DRIVER", "kubernetes"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "OCC_KUBERNETES_CONFIG");
        let c = with(&[
            ("OCC_DATABASE_URL", "x"),
            ("OCC_COMPUTE_DRIVER", "kubernetes"),
            ("OCC_KUBERNETES_CONFIG", "/etc/occ/kubernetes.json"),
            ("OCC_KUBERNETES_CONTEXT", "prod"),
        ])
        .unwrap();
        assert_eq!(c.kubernetes_context.as_deref(), Some("prod"));
    }
}
