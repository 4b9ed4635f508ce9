//! The Docker Compute Driver (SPEC C2): the development default, over the Docker Engine API on
//! its Unix socket.
//!
//! This module owns what a Namespace is on Docker (a bridge network named
//! `occ-<installation>-<namespace>`, labelled `occ.managed-by`, `occ.installation` and
//! `occ.namespace`, on a subnet of the driver's own `SubnetPool`, never from the daemon's
//! default pools), its deletion (every container and network labelled with the Namespace,
//! reported pending until none is left), API version negotiation (`GET /_ping`, capped at
//! 1.41) and the mapping of Docker answers to typed `ComputeError`s. Agent deployment is
//! refused with `HARNESS_BINDING_UNSUPPORTED`, whatever its harness auth (an API-key Secret or
//! a managed account's access token, SPEC M3): the development driver binds no harness.
//!
//! Subnets are shared by every creator on the Engine, so the driver never picks one on its
//! own: it reserves it in the `SubnetLedger` it is given (PostgreSQL, claim-fenced, when the
//! reconciler calls; its process-local `MemoryLedger` otherwise) before it posts the network,
//! and moves the reservation past subnets the daemon refuses as taken by networks the ledger
//! does not know. Names and labels are per Namespace, so they cannot collide between
//! Namespaces; two passes of one Namespace racing on its name meet at 409 and both accept the
//! network only once it carries our labels.
//!
//! It must never touch anything it cannot prove it owns (deletion goes by labels, never by
//! name), never outlive its claim (every request checks the cancel token first, is bounded by
//! the driver's request timeout while the heartbeat renews the claim, and is interrupted the
//! moment the claim is lost: `abortable`), never talk to the database other than
//! through the ledger, and never log or embed Docker's response bodies: errors carry codes,
//! classes and HTTP statuses only.

mod engine;
mod unix;

pub use super::subnet::{Ipv4Cidr, MemoryLedger, SubnetPool, SubnetPoolError};

use super::hooks::{LifecycleHooks, Phase};
use super::*;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The highest Engine API version this driver speaks.
const MAX_API_VERSION: (u32, u32) = (1, 41);
/// The version assumed when a daemon does not say (the Docker client does the same).
const FALLBACK_API_VERSION: (u32, u32) = (1, 24);
/// The largest response body read (container lists on a busy daemon stay well under this).
const BODY_LIMIT: u64 = 16 * 1024 * 1024;
/// The URI authority; the connector ignores it and always dials the socket.
const BASE_URL: &str = "http://docker";
/// How many subnets one `ensure_namespace` posts when foreign creators keep taking them; then
/// the pass reports `NAMESPACE_SUBNET_CONTENDED` (pending, no attempt spent).
const SUBNET_ATTEMPTS: usize = 8;
/// The pending reason of a pass whose every subnet was taken by foreign creators meanwhile.
pub const SUBNET_CONTENDED: &str = "NAMESPACE_SUBNET_CONTENDED";

const LABEL_MANAGED_BY: &str = "occ.managed-by";
const LABEL_INSTALLATION: &str = "occ.installation";
const LABEL_NAMESPACE: &str = "occ.namespace";
const LABEL_REVISION: &str = "occ.revision";
const LABEL_AGENT: &str = "occ.agent";
const MANAGED_BY: &str = "occ-worker";

/// The Docker Compute Driver.
pub struct DockerDriver {
    agent: ureq::Agent,
    /// The upper bound of one request; a lost claim ends it sooner.
    request_timeout: Duration,
    /// The negotiated `/v1.xx` path prefix, set by the first successful `_ping`.
    api_prefix: OnceLock<String>,
    /// Where Namespace networks get their subnets.
    subnet_pool: SubnetPool,
    /// Reservations of `ensure_namespace` calls made without a ledger (no database).
    local_ledger: MemoryLedger,
    /// The Installation's lifecycle hooks, given at construction: the Namespace phases only,
    /// Docker runs no workload (SPEC H3, C2).
    hooks: Arc<LifecycleHooks>,
}

/// One answer from the daemon, body read in full (never logged).
struct Reply {
    status: u16,
    api_version: Option<String>,
    body: Vec<u8>,
}

impl Reply {
    fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

enum Request {
    Get,
    Delete,
    Post(serde_json::Value),
}

#[derive(Deserialize)]
struct NetworkInfo {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "Labels", default)]
    labels: Option<HashMap<String, String>>,
    #[serde(rename = "IPAM", default)]
    ipam: Option<Ipam>,
}

#[derive(Deserialize)]
struct Ipam {
    #[serde(rename = "Config", default)]
    config: Option<Vec<IpamConfig>>,
}

#[derive(Deserialize)]
struct IpamConfig {
    #[serde(rename = "Subnet", default)]
    subnet: Option<String>,
}

impl NetworkInfo {
    /// The network's IPv4 subnets; IPv6 and unparsable entries are ignored.
    fn ipv4_subnets(&self) -> impl Iterator<Item = Ipv4Cidr> + '_ {
        self.ipam
            .iter()
            .flat_map(|ipam| ipam.config.iter().flatten())
            .filter_map(|config| config.subnet.as_deref().and_then(Ipv4Cidr::parse))
    }
}

/// What became of one `POST /networks/create`.
enum Created {
    /// Created, or a network of that name already exists (409).
    Done,
    /// The daemon refused the subnet as taken.
    SubnetTaken,
}

/// What became of `create_network`.
enum Placement {
    /// The network exists (created now, or by a concurrent pass of the same Namespace).
    Created,
    /// Every subnet tried was taken by networks the ledger does not know: try again later.
    Contended,
}

#[derive(Deserialize)]
struct ContainerInfo {
    #[serde(rename = "Id")]
    id: String,
}

impl DockerDriver {
    /// A driver for `docker_host`, which must be `unix:///path/to/docker.sock`, taking subnets
    /// from the default pool (`SubnetPool::DEFAULT`). Makes no request: `preflight` checks the
    /// daemon answers.
    pub fn new(docker_host: &str) -> Result<DockerDriver, ComputeError> {
        let path = docker_host
            .strip_prefix("unix://")
            .filter(|p| p.starts_with('/'))
            .ok_or_else(|| ComputeError::permanent("INVALID_DOCKER_HOST", "config", None))?;
        let config = ureq::config::Config::builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .max_idle_connections(4)
            .max_idle_connections_per_host(4)
            .build();
        let connector = super::abortable::AbortableConnector(unix::UnixConnector {
            path: PathBuf::from(path),
        });
        Ok(DockerDriver {
            agent: ureq::Agent::with_parts(config, connector, unix::NoResolver),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            api_prefix: OnceLock::new(),
            subnet_pool: SubnetPool::default(),
            local_ledger: MemoryLedger::default(),
            hooks: Arc::default(),
        })
    }

    /// The same driver, bounding each request by `timeout` (`OCC_COMPUTE_REQUEST_TIMEOUT_MS`)
    /// instead of `DEFAULT_REQUEST_TIMEOUT`.
    pub fn with_request_timeout(self, timeout: Duration) -> DockerDriver {
        DockerDriver {
            request_timeout: timeout,
            ..self
        }
    }

    /// The same driver, running the Installation's lifecycle hooks (SPEC H2, H3): a driver is
    /// built with its hooks, before anything can call it.
    pub fn with_lifecycle_hooks(self, hooks: Arc<LifecycleHooks>) -> DockerDriver {
        DockerDriver { hooks, ..self }
    }

    /// The same driver, giving Namespace networks subnets from `pool`.
    pub fn with_subnet_pool(self, pool: SubnetPool) -> DockerDriver {
        DockerDriver {
            subnet_pool: pool,
            ..self
        }
    }

    /// What the hooks are asked about a Namespace.
    fn namespace_subject<'a>(&'a self, namespace: &'a NamespaceSpec) -> hooks::HookSubject<'a> {
        hooks::HookSubject {
            installation_id: &namespace.installation_id,
            namespace_id: &namespace.namespace_id,
            agent_id: None,
            revision_id: None,
            compute_driver_id: self.id(),
        }
    }
}

impl ComputeDriver for DockerDriver {
    fn id(&self) -> &str {
        "docker"
    }

    fn implementation(&self) -> &str {
        "docker"
    }

    fn preflight(&self, cancel: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        self.ping(cancel)?;
        Ok(Vec::new())
    }

    /// Without a ledger from the caller, reservations are this driver's process-local
    /// `MemoryLedger`: fine for one process, never for several workers.
    fn ensure_namespace(
        &self,
        namespace: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        let ledger = self.local_ledger.namespace(&namespace.namespace_id);
        self.ensure_namespace_reserving(namespace, &ledger, cancel)
    }

    /// Expected flow: list the Namespace's networks by its labels, so that a network an
    /// earlier pass created (one that died, or whose answer was lost) is adopted, never
    /// created again; if there is none, create it on the subnet reserved in `ledger`
    /// (`create_network`; 409 = a concurrent pass of this Namespace won) and list again; keep
    /// one network and remove any other (`keep_one`), then list once more when any was
    /// removed. Guarantees: `complete` only once exactly one network of the Namespace exists,
    /// named for it and carrying all three of our labels; an existing network keeps whatever
    /// subnet it has; no subnet is posted without a reservation. Subnets taken by foreign
    /// networks on every try, or by a create still under way in the daemon: pending
    /// `NAMESPACE_SUBNET_CONTENDED`; a duplicate that would not go: pending
    /// `NETWORK_REMOVAL_PENDING` (never a failure). Errors: a same-named network without our
    /// labels is `NAMESPACE_NAME_CONFLICT`; `existing_namespace` (a Kubernetes namespace) is
    /// `EXISTING_NAMESPACE_UNSUPPORTED`; a full pool is `NAMESPACE_SUBNET_POOL_EXHAUSTED`.
    fn ensure_namespace_reserving(
        &self,
        namespace: &NamespaceSpec,
        ledger: &dyn SubnetLedger,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        if namespace.existing_namespace.is_some() {
            return Err(ComputeError::permanent(
                "EXISTING_NAMESPACE_UNSUPPORTED",
                "docker",
                None,
            ));
        }
        let api = self.api(cancel)?;
        let name = network_name(namespace);
        let owned = ownership(namespace);
        let pending = |reason: &str| NamespaceObservation {
            namespace_id: namespace.namespace_id.clone(),
            complete: false,
            failure: None,
            pending_reason: Some(reason.to_string()),
            reason: None,
        };
        let mut ours = self.list_networks(&api, &owned, cancel)?;
        if ours.is_empty() {
            match self.create_network(&api, &name, namespace, ledger, cancel)? {
                Placement::Created => ours = self.list_networks(&api, &owned, cancel)?,
                Placement::Contended => return Ok(pending(SUBNET_CONTENDED)),
            }
            if ours.is_empty() {
                // 409 from a network of that name that is not ours, or ours gone again
                // (someone is deleting it: try later).
                return match self.inspect_network(&api, &name, cancel)? {
                    Some(_) => Err(name_conflict()),
                    None => Err(ComputeError::retryable("docker_api", Some(404))),
                };
            }
        }
        let removed = ours.len() > 1;
        let network = self.keep_one(&api, ours, ledger, cancel)?;
        if network.name != name || !is_ours(&network, namespace) {
            return Err(name_conflict());
        }
        if removed && self.list_networks(&api, &owned, cancel)?.len() > 1 {
            return Ok(pending("NETWORK_REMOVAL_PENDING"));
        }
        // Otherwise ready: the hooks are the last word before it is reported so (SPEC H3).
        self.hooks.run(
            Phase::AfterNamespacePrepared,
            &self.namespace_subject(namespace),
            &[],
            cancel,
        )?;
        Ok(NamespaceObservation {
            namespace_id: namespace.namespace_id.clone(),
            complete: true,
            failure: None,
            pending_reason: None,
            reason: None,
        })
    }

    /// Expected flow: force-remove every container labelled with the Namespace, remove every
    /// network labelled with it, then list both again. Guarantees: `complete` only when
    /// nothing labelled remains; otherwise `CONTAINER_REMOVAL_PENDING` or
    /// `NETWORK_REMOVAL_PENDING` and the reconciler asks again. Assumptions: idempotent, it
    /// may run again after a lost lease; it never touches anything unlabelled.
    fn delete_namespace(
        &self,
        namespace: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        let api = self.api(cancel)?;
        // Ownership is this installation's label and the Namespace's, together.
        let owned = ownership(namespace);
        // The hooks are asked once, before the first thing is deleted; a refusal keeps all of
        // it (SPEC H3, H4).
        let mut asked = false;
        let mut before_delete = |cancel: &CancelToken| -> Result<(), ComputeError> {
            if !asked {
                self.hooks.run(
                    Phase::BeforeNamespaceDelete,
                    &self.namespace_subject(namespace),
                    &[],
                    cancel,
                )?;
                asked = true;
            }
            Ok(())
        };
        for container in self.list_containers(&api, &owned, cancel)? {
            before_delete(cancel)?;
            self.remove_container(&api, &container.id, cancel)?;
        }
        for network in self.list_networks(&api, &owned, cancel)? {
            before_delete(cancel)?;
            self.remove_network(&api, &network.id, cancel)?;
        }
        let pending_reason = if !self.list_containers(&api, &owned, cancel)?.is_empty() {
            Some("CONTAINER_REMOVAL_PENDING")
        } else if !self.list_networks(&api, &owned, cancel)?.is_empty() {
            Some("NETWORK_REMOVAL_PENDING")
        } else {
            None
        };
        if pending_reason.is_none() {
            // Callers with a database release their reservation with the tombstone.
            self.local_ledger.release(&namespace.namespace_id);
        }
        Ok(NamespaceObservation {
            namespace_id: namespace.namespace_id.clone(),
            complete: pending_reason.is_none(),
            reason: None,
            failure: None,
            pending_reason: pending_reason.map(str::to_string),
        })
    }

    fn prepare_revision(
        &self,
        _revision: &RevisionSpec,
        _cancel: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        Err(harness_binding_unsupported())
    }

    fn deactivate_revision(
        &self,
        _revision: &RevisionSpec,
        _cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        Err(harness_binding_unsupported())
    }

    /// The development driver keeps no per-Agent objects: nothing to bind (C1 allows a
    /// Compute without per-Agent objects). Stops, retirements and deletions still clean up.
    fn bind_agent(&self, _agent: &AgentSpec, cancel: &CancelToken) -> Result<(), ComputeError> {
        cancel.check()?;
        Ok(())
    }

    fn activate_revision(
        &self,
        _revision: &RevisionSpec,
        _cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        Err(harness_binding_unsupported())
    }

    fn stop_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.remove_labelled_containers(&revision_labels(revision), cancel)
    }

    fn retire_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.remove_labelled_containers(&revision_labels(revision), cancel)
    }

    /// Docker holds no credentials; removing the Agent's containers is all there is to do.
    fn delete_agent_runtime_credentials(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.remove_labelled_containers(
            &[
                (LABEL_INSTALLATION, agent.installation_id.as_str()),
                (LABEL_NAMESPACE, agent.namespace_id.as_str()),
                (LABEL_AGENT, agent.agent_id.as_str()),
            ],
            cancel,
        )
    }

    fn policy(&self) -> &dyn DriverPolicy {
        self
    }
}

impl DriverPolicy for DockerDriver {
    fn requires_stopped_predecessors(&self, _revision: &RevisionSpec) -> bool {
        false
    }

    /// The Namespace phases (SPEC H2, H3); Docker has no workload to hook.
    fn lifecycle_hooks(&self) -> Option<&LifecycleHooks> {
        Some(&self.hooks)
    }
}

fn name_conflict() -> ComputeError {
    ComputeError::permanent("NAMESPACE_NAME_CONFLICT", "docker", None)
}

fn harness_binding_unsupported() -> ComputeError {
    ComputeError::permanent("HARNESS_BINDING_UNSUPPORTED", "docker", None)
}

/// The Namespace's network name: `occ-<installation_id>-<namespace_id>`.
pub fn network_name(namespace: &NamespaceSpec) -> String {
    format!(
        "occ-{}-{}",
        namespace.installation_id, namespace.namespace_id
    )
}

fn namespace_labels(namespace: &NamespaceSpec) -> HashMap<&'static str, &str> {
    HashMap::from([
        (LABEL_MANAGED_BY, MANAGED_BY),
        (LABEL_INSTALLATION, namespace.installation_id.as_str()),
        (LABEL_NAMESPACE, namespace.namespace_id.as_str()),
    ])
}

/// The labels a revision's containers carry, all required before one is removed.
fn revision_labels(revision: &RevisionSpec) -> [(&'static str, &str); 3] {
    [
        (LABEL_INSTALLATION, revision.installation_id.as_str()),
        (LABEL_NAMESPACE, revision.namespace_id.as_str()),
        (LABEL_REVISION, revision.revision_id.as_str()),
    ]
}

/// Whether the network carries all of the Namespace's labels.
/// The labels that make a network or container this installation's and this Namespace's.
fn ownership(namespace: &NamespaceSpec) -> [(&'static str, &str); 2] {
    [
        (LABEL_INSTALLATION, namespace.installation_id.as_str()),
        (LABEL_NAMESPACE, namespace.namespace_id.as_str()),
    ]
}

fn is_ours(network: &NetworkInfo, namespace: &NamespaceSpec) -> bool {
    let Some(labels) = &network.labels else {
        return false;
    };
    namespace_labels(namespace)
        .into_iter()
        .all(|(key, value)| labels.get(key).map(String::as_str) == Some(value))
}

/// Parses an `API-Version` header such as `1.41`.
fn parse_api_version(value: &str) -> Option<(u32, u32)> {
    let (major, minor) = value.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// A non-2xx status the caller did not expect: 429 and 5xx are transient, the rest a refusal.
fn rejected(status: u16) -> ComputeError {
    if status == 429 || status >= 500 {
        ComputeError::transient("docker_api", Some(status))
    } else {
        ComputeError::permanent("DOCKER_REQUEST_REJECTED", "docker_api", Some(status))
    }
}

/// Whether a refused `POST /networks/create` says the requested subnet overlaps one in use.
///
/// The status decides where it can: Engine 20.10 answers 403 (libnetwork's `ErrPoolOverlap`
/// is a forbidden error), and the create endpoint's only other 403, "operation not supported
/// for pre-defined networks", cannot apply to `occ-` names. Some daemons answer 400, which
/// also covers every other malformed request; for 400 alone this function, and nothing else
/// in the driver, looks into the body for the daemon's fixed phrase "Pool overlaps". The body
/// is only matched, never copied into an error or a log.
fn is_subnet_taken(reply: &Reply) -> bool {
    const PHRASE: &[u8] = b"pool overlaps";
    match reply.status {
        403 => true,
        400 => reply
            .body
            .windows(PHRASE.len())
            .any(|w| w.eq_ignore_ascii_case(PHRASE)),
        _ => false,
    }
}

/// Decodes a 2xx JSON answer; anything malformed is an invalid observation.
fn decode<T: DeserializeOwned>(reply: &Reply) -> Result<T, ComputeError> {
    serde_json::from_slice(&reply.body).map_err(|_| {
        ComputeError::permanent("INVALID_DRIVER_OBSERVATION", "decode", Some(reply.status))
    })
}

/// Maps a failure below HTTP status level. Only kinds travel, never messages.
fn transport_error(error: &ureq::Error) -> ComputeError {
    match error {
        ureq::Error::Protocol(_)
        | ureq::Error::LargeResponseHeader(..)
        | ureq::Error::BodyExceedsLimit(_)
        | ureq::Error::Json(_) => {
            ComputeError::permanent("INVALID_DRIVER_OBSERVATION", "decode", None)
        }
        ureq::Error::BadUri(_) | ureq::Error::Http(_) => {
            ComputeError::permanent("DOCKER_REQUEST_REJECTED", "docker_request", None)
        }
        // Socket missing, connection refused or reset, timeouts, stalled bodies.
        _ => ComputeError::transient("docker_unavailable", None),
    }
}

/// A `filters` query value selecting objects carrying every `label=value` of `labels`.
fn label_filter(labels: &[(&str, &str)]) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    encode(&json!({ "label": labels }).to_string())
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
