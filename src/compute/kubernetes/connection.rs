//! Where the Kubernetes API is and how to authenticate to it (SPEC C3 "Connection").
//!
//! This module owns discovery: the in-cluster service account (when `KUBERNETES_SERVICE_HOST`
//! and `KUBERNETES_SERVICE_PORT` are set and no context is asked for), else a kubeconfig: the
//! first path of `KUBECONFIG` (later paths of a colon-separated list are not merged), or
//! `$HOME/.kube/config`, at its current context or the one named by `OCC_KUBERNETES_CONTEXT`.
//! It resolves kubeconfig file paths relative to the kubeconfig's directory, decodes the
//! `-data` forms and parses PEM, checks an exec plugin's block (`exec` runs it, the client
//! caches its token), and refuses what occ-worker does not support (auth providers, basic
//! auth, impersonation, plain http, `insecure-skip-tls-verify`, a cluster without a
//! certificate authority) with one-line errors naming the feature. It must never open a socket, never offer a way to skip TLS verification, and never put a token or
//! key material in an error. Certificates and keys are ureq's types, parsed by its PEM reader
//! (rustls-pki-types underneath), so the client hands them to rustls unconverted.

use super::connection_error::{ConnectionError, ConnectionErrorKind};
use crate::variable::{Unset, Variable};
use base64::Engine;
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use ureq::tls::{Certificate, PemItem, PrivateKey};

/// The environment `discover` reads, for `run --help` and `check --help` (`config::VARIABLES`
/// has the worker's own settings, `OCC_KUBERNETES_CONTEXT` among them).
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "KUBERNETES_SERVICE_HOST",
        unset: Unset::Means("not in a cluster: the kubeconfig"),
        help: "With KUBERNETES_SERVICE_PORT and no OCC_KUBERNETES_CONTEXT, the in-cluster API server and service account",
    },
    Variable {
        name: "KUBERNETES_SERVICE_PORT",
        unset: Unset::Means("not in a cluster: the kubeconfig"),
        help: "The in-cluster API server's port",
    },
    Variable {
        name: "KUBECONFIG",
        unset: Unset::Means("$HOME/.kube/config"),
        help: "The kubeconfig outside a cluster (the first path of a list)",
    },
    Variable {
        name: "HOME",
        unset: Unset::Means("no kubeconfig unless KUBECONFIG is set"),
        help: "Where the default kubeconfig is",
    },
];

/// Where a pod's service account credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The largest kubeconfig, certificate or token file read.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// A resolved API server and the credentials to use with it.
pub struct Connection {
    /// `https://host:port` (and a path prefix, if the kubeconfig has one), no trailing slash.
    pub server: String,
    /// The certificate authorities the server's certificate is verified against.
    pub ca_certs: Vec<Certificate<'static>>,
    pub auth: Auth,
    /// `in-cluster`, or `kubeconfig <path> context <name>`, for `check` output.
    pub source: String,
}

/// How requests authenticate.
pub enum Auth {
    None,
    /// A bearer token fixed in the kubeconfig.
    Token(String),
    /// A bearer token read from a file, re-read as it rotates.
    TokenFile(PathBuf),
    ClientCert {
        chain: Vec<Certificate<'static>>,
        key: PrivateKey<'static>,
    },
    /// A bearer token printed by an exec credential plugin, run again as it expires.
    Exec {
        config: super::exec::ExecConfig,
        /// The kubeconfig's directory, for a relative command path.
        base: PathBuf,
    },
}

impl fmt::Debug for Auth {
    /// Names the method only: tokens and keys never reach a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Token(_) => f.write_str("Token(..)"),
            Auth::TokenFile(path) => write!(f, "TokenFile({})", path.display()),
            Auth::ClientCert { chain, .. } => write!(f, "ClientCert({} certificates)", chain.len()),
            Auth::Exec { config, .. } => write!(f, "Exec({})", config.command),
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("server", &self.server)
            .field("ca_certs", &self.ca_certs.len())
            .field("auth", &self.auth)
            .field("source", &self.source)
            .finish()
    }
}

/// Finds the API server: in-cluster when `KUBERNETES_SERVICE_HOST` and
/// `KUBERNETES_SERVICE_PORT` are set and `context` is `None`, else the kubeconfig. `lookup`
/// reads environment variables; `context` is `OCC_KUBERNETES_CONTEXT`.
pub fn discover(
    lookup: impl Fn(&str) -> Option<String>,
    context: Option<&str>,
) -> Result<Connection, ConnectionError> {
    let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
    if context.is_none() {
        if let (Some(host), Some(port)) = (
            var("KUBERNETES_SERVICE_HOST"),
            var("KUBERNETES_SERVICE_PORT"),
        ) {
            return discover_in_cluster(Path::new(SERVICE_ACCOUNT_DIR), &host, &port);
        }
    }
    let path = match (var("KUBECONFIG"), var("HOME")) {
        (Some(list), _) => match list.split(':').find(|p| !p.is_empty()) {
            Some(first) => PathBuf::from(first),
            None => return Err(not_configured()),
        },
        (None, Some(home)) => Path::new(&home).join(".kube").join("config"),
        (None, None) => return Err(not_configured()),
    };
    from_kubeconfig(&path, context)
}

fn not_configured() -> ConnectionError {
    ConnectionError::new(
        ConnectionErrorKind::NotConfigured,
        "no Kubernetes connection: not in a cluster (KUBERNETES_SERVICE_HOST unset) and neither KUBECONFIG nor HOME is set",
    )
}

/// The in-cluster connection: the service account token and CA under `dir`, the server at
/// `host:port`.
pub fn discover_in_cluster(
    dir: &Path,
    host: &str,
    port: &str,
) -> Result<Connection, ConnectionError> {
    let source = "in-cluster";
    if port.parse::<u16>().is_err() {
        return Err(ConnectionError::new(
            ConnectionErrorKind::Malformed,
            format!("{source}: KUBERNETES_SERVICE_PORT must be a port number"),
        ));
    }
    let token_path = dir.join("token");
    read_token(&token_path).map_err(|e| prefix(source, e))?;
    let ca_path = dir.join("ca.crt");
    let ca_pem = read_file(&ca_path).map_err(|e| prefix(source, e))?;
    let ca_certs = parse_certs(&ca_pem, &format!("{source}: {}", ca_path.display()))?;
    let server = if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    };
    Ok(Connection {
        server,
        ca_certs,
        auth: Auth::TokenFile(token_path),
        source: source.to_string(),
    })
}

/// Reads a bearer token file: trimmed, non-empty. The error never carries file content.
pub(crate) fn read_token(path: &Path) -> Result<String, ConnectionError> {
    let bytes = read_file(path)?;
    let token = String::from_utf8(bytes)
        .map(|t| t.trim().to_string())
        .unwrap_or_default();
    if token.is_empty() || token.chars().any(|c| c.is_control() || c == ' ') {
        return Err(ConnectionError::new(
            ConnectionErrorKind::Credential,
            format!("token file {} is empty or not a token", path.display()),
        ));
    }
    Ok(token)
}

fn read_file(path: &Path) -> Result<Vec<u8>, ConnectionError> {
    let io = |e: std::io::Error| {
        ConnectionError::new(
            ConnectionErrorKind::Io,
            format!("cannot read {} ({e})", path.display()),
        )
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ConnectionError::new(
            ConnectionErrorKind::Io,
            format!("{} is larger than {MAX_FILE_BYTES} bytes", path.display()),
        ));
    }
    Ok(bytes)
}

fn prefix(source: &str, error: ConnectionError) -> ConnectionError {
    ConnectionError::new(error.kind(), format!("{source}: {error}"))
}

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Option<Vec<Named<Cluster>>>,
    #[serde(default)]
    users: Option<Vec<Named<User>>>,
    #[serde(default)]
    contexts: Option<Vec<Named<Context>>>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: Option<T>,
}

#[derive(Deserialize)]
struct Cluster {
    server: Option<String>,
    #[serde(rename = "certificate-authority")]
    certificate_authority: Option<String>,
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify", default)]
    insecure_skip_tls_verify: bool,
    #[serde(rename = "tls-server-name")]
    tls_server_name: Option<String>,
    #[serde(rename = "proxy-url")]
    proxy_url: Option<String>,
}

#[derive(Deserialize)]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    #[serde(rename = "client-certificate")]
    client_certificate: Option<String>,
    #[serde(rename = "client-certificate-data")]
    client_certificate_data: Option<String>,
    #[serde(rename = "client-key")]
    client_key: Option<String>,
    #[serde(rename = "client-key-data")]
    client_key_data: Option<String>,
    exec: Option<super::exec::ExecConfig>,
    #[serde(rename = "auth-provider")]
    auth_provider: Option<IgnoredAny>,
    username: Option<String>,
    password: Option<String>,
    #[serde(rename = "as")]
    impersonate: Option<String>,
    #[serde(rename = "as-groups")]
    impersonate_groups: Option<IgnoredAny>,
    #[serde(rename = "as-uid")]
    impersonate_uid: Option<String>,
}

#[derive(Deserialize)]
struct Context {
    cluster: Option<String>,
    user: Option<String>,
}

/// The connection a kubeconfig file describes at `context` (its current context when `None`).
pub fn from_kubeconfig(path: &Path, context: Option<&str>) -> Result<Connection, ConnectionError> {
    let origin = format!("kubeconfig {}", path.display());
    let text = read_file(path).map_err(|e| prefix(&origin, e))?;
    let config: Kubeconfig = serde_yaml_ng::from_slice(&text).map_err(|e| {
        ConnectionError::new(
            ConnectionErrorKind::Malformed,
            format!("{origin}: not a valid kubeconfig ({e})"),
        )
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let kubeconfig = Source {
        origin: &origin,
        base,
    };
    kubeconfig.resolve(config, context)
}

/// A kubeconfig being resolved: where it came from and the directory relative paths start in.
struct Source<'a> {
    origin: &'a str,
    base: &'a Path,
}

impl Source<'_> {
    fn error(&self, kind: ConnectionErrorKind, what: impl fmt::Display) -> ConnectionError {
        ConnectionError::new(kind, format!("{}: {what}", self.origin))
    }

    fn resolve(
        &self,
        config: Kubeconfig,
        context: Option<&str>,
    ) -> Result<Connection, ConnectionError> {
        let missing = ConnectionErrorKind::Missing;
        let context_name = match context.or(config.current_context.as_deref()) {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => {
                return Err(self.error(
                    missing,
                    "has no current-context; set OCC_KUBERNETES_CONTEXT",
                ))
            }
        };
        let ctx = find(config.contexts, &context_name)
            .ok_or_else(|| self.error(missing, format!("context {context_name:?} not found")))?;
        let cluster_name = ctx.cluster.filter(|c| !c.is_empty()).ok_or_else(|| {
            self.error(
                missing,
                format!("context {context_name:?} names no cluster"),
            )
        })?;
        let cluster = find(config.clusters, &cluster_name)
            .ok_or_else(|| self.error(missing, format!("cluster {cluster_name:?} not found")))?;
        let auth = match ctx.user.filter(|u| !u.is_empty()) {
            None => Auth::None,
            Some(user_name) => {
                let user = find(config.users, &user_name)
                    .ok_or_else(|| self.error(missing, format!("user {user_name:?} not found")))?;
                self.auth(&user_name, user)?
            }
        };
        let (server, ca_certs) = self.cluster(&cluster_name, cluster)?;
        Ok(Connection {
            server,
            ca_certs,
            auth,
            source: format!("{} context {context_name}", self.origin),
        })
    }

    fn cluster(
        &self,
        name: &str,
        cluster: Cluster,
    ) -> Result<(String, Vec<Certificate<'static>>), ConnectionError> {
        let unsupported = ConnectionErrorKind::Unsupported;
        if cluster.insecure_skip_tls_verify {
            return Err(self.error(
                unsupported,
                format!("cluster {name:?} sets insecure-skip-tls-verify, which occ-worker refuses; configure its certificate-authority"),
            ));
        }
        if cluster.tls_server_name.is_some() {
            return Err(self.error(
                unsupported,
                format!("cluster {name:?} sets tls-server-name, which occ-worker does not support"),
            ));
        }
        if cluster.proxy_url.is_some() {
            return Err(self.error(
                unsupported,
                format!("cluster {name:?} sets proxy-url, which occ-worker does not support"),
            ));
        }
        let server = cluster.server.unwrap_or_default();
        let server = server.trim_end_matches('/');
        if server.is_empty() {
            return Err(self.error(
                ConnectionErrorKind::Missing,
                format!("cluster {name:?} has no server"),
            ));
        }
        if !server.starts_with("https://") || server.len() == "https://".len() {
            return Err(self.error(
                unsupported,
                format!(
                    "cluster {name:?} server is not an https:// URL; occ-worker always uses TLS"
                ),
            ));
        }
        let what = format!("cluster {name:?} certificate-authority");
        let pem = match (cluster.certificate_authority_data, cluster.certificate_authority) {
            (Some(data), _) => self.decode_data(&format!("{what}-data"), &data)?,
            (None, Some(file)) => self.read_relative(&what, &file)?,
            (None, None) => {
                return Err(self.error(
                    unsupported,
                    format!("cluster {name:?} has no certificate-authority; occ-worker verifies TLS only against a configured CA"),
                ))
            }
        };
        let ca_certs = parse_certs(&pem, &format!("{}: {what}", self.origin))?;
        Ok((server.to_string(), ca_certs))
    }

    /// The user's credentials: a token (fixed or from a file) wins over a client certificate,
    /// as with kubectl's bearer header; none at all is `Auth::None`.
    fn auth(&self, name: &str, user: User) -> Result<Auth, ConnectionError> {
        self.refuse_unsupported(name, &user)?;
        if let Some(config) = user.exec {
            super::exec::validate(&config).map_err(|e| prefix(self.origin, e))?;
            return Ok(Auth::Exec {
                config,
                base: self.base.to_path_buf(),
            });
        }
        if let Some(token) = user
            .token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            return Ok(Auth::Token(token.to_string()));
        }
        if let Some(file) = user.token_file.as_deref().filter(|f| !f.is_empty()) {
            let path = self.base.join(file);
            read_token(&path).map_err(|e| prefix(self.origin, e))?;
            return Ok(Auth::TokenFile(path));
        }
        self.client_cert(name, user)
    }

    /// Exec plugins, auth providers, basic auth and impersonation are refused by name.
    fn refuse_unsupported(&self, name: &str, user: &User) -> Result<(), ConnectionError> {
        let feature = if user.auth_provider.is_some() {
            "an auth-provider"
        } else if user.username.is_some() || user.password.is_some() {
            "a username and password"
        } else if user.impersonate.is_some()
            || user.impersonate_groups.is_some()
            || user.impersonate_uid.is_some()
        {
            "impersonation (as)"
        } else {
            return Ok(());
        };
        Err(self.error(
            ConnectionErrorKind::Unsupported,
            format!("user {name:?} uses {feature}, which occ-worker does not support; use a token or client certificate"),
        ))
    }

    /// A client certificate and key, each from its `-data` form (which wins) or a file;
    /// neither is `Auth::None`, one without the other is an error.
    fn client_cert(&self, name: &str, user: User) -> Result<Auth, ConnectionError> {
        let cert = format!("user {name:?} client-certificate");
        let key = format!("user {name:?} client-key");
        let cert_pem = match (user.client_certificate_data, user.client_certificate) {
            (Some(data), _) => Some(self.decode_data(&format!("{cert}-data"), &data)?),
            (None, Some(file)) => Some(self.read_relative(&cert, &file)?),
            (None, None) => None,
        };
        let key_pem = match (user.client_key_data, user.client_key) {
            (Some(data), _) => Some(self.decode_data(&format!("{key}-data"), &data)?),
            (None, Some(file)) => Some(self.read_relative(&key, &file)?),
            (None, None) => None,
        };
        match (cert_pem, key_pem) {
            (None, None) => Ok(Auth::None),
            (Some(cert_pem), Some(key_pem)) => {
                let chain = parse_certs(&cert_pem, &format!("{}: {cert}", self.origin))?;
                let key = PrivateKey::from_pem(&key_pem).map_err(|_| {
                    self.error(
                        ConnectionErrorKind::Credential,
                        format!("{key} holds no PEM private key"),
                    )
                })?;
                Ok(Auth::ClientCert { chain, key })
            }
            (Some(_), None) => Err(self.error(
                ConnectionErrorKind::Missing,
                format!("user {name:?} has a client certificate but no client-key"),
            )),
            (None, Some(_)) => Err(self.error(
                ConnectionErrorKind::Missing,
                format!("user {name:?} has a client-key but no client certificate"),
            )),
        }
    }

    fn decode_data(&self, what: &str, data: &str) -> Result<Vec<u8>, ConnectionError> {
        let compact: String = data.split_whitespace().collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map_err(|_| {
                self.error(
                    ConnectionErrorKind::Credential,
                    format!("{what} is not valid base64"),
                )
            })
    }

    fn read_relative(&self, what: &str, file: &str) -> Result<Vec<u8>, ConnectionError> {
        let path = self.base.join(file);
        read_file(&path).map_err(|e| self.error(e.kind(), format!("{what}: {e}")))
    }
}

fn find<T>(items: Option<Vec<Named<T>>>, name: &str) -> Option<T> {
    items
        .unwrap_or_default()
        .into_iter()
        .find(|item| item.name == name)
        .and_then(|item| item.value)
}

/// Every certificate in `pem`; at least one.
fn parse_certs(pem: &[u8], what: &str) -> Result<Vec<Certificate<'static>>, ConnectionError> {
    let certs: Result<Vec<_>, _> = ureq::tls::parse_pem(pem)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(cert)) => Some(Ok(cert)),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
        .collect();
    match certs {
        Ok(certs) if !certs.is_empty() => Ok(certs),
        _ => Err(ConnectionError::new(
            ConnectionErrorKind::Credential,
            format!("{what} holds no PEM certificate"),
        )),
    }
}

#[cfg(test)]
mod tests;
