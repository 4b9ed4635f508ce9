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
/// The upper bound of one request unless configured (`OCC_COMPUTE_REQUEST_TIMEOUT_MS`).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
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
            request_timeout: REQUEST_TIMEOUT,
            api_prefix: OnceLock::new(),
            subnet_pool: SubnetPool::default(),
            local_ledger: MemoryLedger::default(),
            hooks: Arc::default(),
        })
    }

    /// The same driver, bounding each request by `timeout` instead of `REQUEST_TIMEOUT`.
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

    /// Sends one request: a cancellation point, bounded by the request timeout and
    /// interrupted when `cancel` is (the token is current on this thread meanwhile).
    fn send(
        &self,
        request: Request,
        path: &str,
        cancel: &CancelToken,
    ) -> Result<Reply, ComputeError> {
        cancel.check()?;
        let _current = cancel.enter();
        let timeout = self.request_timeout;
        let url = format!("{BASE_URL}{path}");
        let result = match request {
            Request::Get => self
                .agent
                .get(&url)
                .config()
                .timeout_global(Some(timeout))
                .build()
                .call(),
            Request::Delete => self
                .agent
                .delete(&url)
                .config()
                .timeout_global(Some(timeout))
                .build()
                .call(),
            Request::Post(body) => self
                .agent
                .post(&url)
                .config()
                .timeout_global(Some(timeout))
                .build()
                .send_json(&body),
        };
        let read = result.and_then(|mut response| {
            let status = response.status().as_u16();
            let api_version = response
                .headers()
                .get("api-version")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = response
                .body_mut()
                .with_config()
                .limit(BODY_LIMIT)
                .read_to_vec()?;
            Ok(Reply {
                status,
                api_version,
                body,
            })
        });
        read.map_err(|e| {
            // A request cut short by a lost claim is a cancellation, not an outage.
            match cancel.check() {
                Err(cancelled) => ComputeError::cancelled(cancelled),
                Ok(()) => transport_error(&e),
            }
        })
    }

    /// `GET /_ping`: the daemon answers, and says which API version it speaks.
    fn ping(&self, cancel: &CancelToken) -> Result<String, ComputeError> {
        let reply = self.send(Request::Get, "/_ping", cancel)?;
        if !reply.is_success() {
            return Err(ComputeError::transient(
                "docker_unavailable",
                Some(reply.status),
            ));
        }
        let server = reply
            .api_version
            .as_deref()
            .and_then(parse_api_version)
            .unwrap_or(FALLBACK_API_VERSION);
        let (major, minor) = server.min(MAX_API_VERSION);
        let prefix = format!("/v{major}.{minor}");
        Ok(self.api_prefix.get_or_init(|| prefix).clone())
    }

    /// The negotiated `/v1.xx` prefix, negotiating on first use.
    fn api(&self, cancel: &CancelToken) -> Result<String, ComputeError> {
        match self.api_prefix.get() {
            Some(prefix) => Ok(prefix.clone()),
            None => self.ping(cancel),
        }
    }

    /// Inspects a network by name or id; `None` when the daemon has no such network.
    fn inspect_network(
        &self,
        api: &str,
        name: &str,
        cancel: &CancelToken,
    ) -> Result<Option<NetworkInfo>, ComputeError> {
        let path = format!("{api}/networks/{}", encode(name));
        let reply = self.send(Request::Get, &path, cancel)?;
        match reply.status {
            404 => Ok(None),
            _ if reply.is_success() => decode(&reply).map(Some),
            status => Err(rejected(status)),
        }
    }

    /// Creates the Namespace's network on the subnet reserved for it in `ledger`; `Created`
    /// also when it already exists (409).
    ///
    /// Expected flow: reserve (the Namespace's existing reservation, else the lowest free
    /// subnet), post. The ledger keeps our own creators apart, so a refusal means something
    /// else holds the subnet. If the daemon's list shows a network of this Namespace, an
    /// earlier pass's create landed: `Created`. If it shows networks the ledger does not know
    /// (another project, another installation on the Engine) on the subnet, reserve again
    /// avoiding every subnet they hold (the reservation moves) and post again, at most
    /// `SUBNET_ATTEMPTS` posts. If it shows nothing on the subnet, the holder is a create still
    /// under way in the daemon, most likely an earlier pass of this Namespace that died or was
    /// cut off after posting: `Contended`, and the next pass finds that network.
    /// Guarantees: nothing is posted on a subnet the ledger did not reserve for this Namespace,
    /// and the reservation never moves away from a subnet whose holder cannot be seen, so two
    /// creates of one Namespace always aim at the same subnet and the daemon admits only one.
    /// Errors: a pool with no free subnet is `NAMESPACE_SUBNET_POOL_EXHAUSTED`; an unavailable
    /// ledger is transient (`subnet_ledger`, the reconciler reports the ledger's own error);
    /// refusals beyond the attempts are `Contended`, never an error.
    fn create_network(
        &self,
        api: &str,
        name: &str,
        namespace: &NamespaceSpec,
        ledger: &dyn SubnetLedger,
        cancel: &CancelToken,
    ) -> Result<Placement, ComputeError> {
        let mut avoid: Vec<Ipv4Cidr> = Vec::new();
        for _ in 0..SUBNET_ATTEMPTS {
            let subnet = ledger
                .reserve(&self.subnet_pool, &avoid)
                .map_err(|LedgerUnavailable| ComputeError::transient("subnet_ledger", None))?
                .ok_or_else(|| {
                    ComputeError::permanent("NAMESPACE_SUBNET_POOL_EXHAUSTED", "docker", None)
                })?;
            match self.post_network(api, name, namespace, subnet, cancel)? {
                Created::Done => return Ok(Placement::Created),
                Created::SubnetTaken => {
                    let networks = self.all_networks(api, cancel)?;
                    if networks.iter().any(|n| is_ours(n, namespace)) {
                        return Ok(Placement::Created);
                    }
                    let held: Vec<Ipv4Cidr> = networks
                        .iter()
                        .flat_map(NetworkInfo::ipv4_subnets)
                        .filter(|s| s.overlaps(self.subnet_pool.network()))
                        .collect();
                    if !held.iter().any(|s| s.overlaps(subnet)) {
                        return Ok(Placement::Contended);
                    }
                    avoid.extend(held);
                }
            }
        }
        Ok(Placement::Contended)
    }

    /// Removes every network in `ours` (the Namespace's, by its labels) but one, keeping the
    /// one on its reserved subnet (or the lowest id), and returns the one kept. Two creates of
    /// one Namespace can both land when the reservation moved between them. No request when
    /// there is one.
    fn keep_one(
        &self,
        api: &str,
        mut ours: Vec<NetworkInfo>,
        ledger: &dyn SubnetLedger,
        cancel: &CancelToken,
    ) -> Result<NetworkInfo, ComputeError> {
        if ours.len() > 1 {
            let reserved = ledger
                .reserve(&self.subnet_pool, &[])
                .map_err(|LedgerUnavailable| ComputeError::transient("subnet_ledger", None))?;
            ours.sort_by(|a, b| a.id.cmp(&b.id));
            let keep = ours
                .iter()
                .position(|n| reserved.is_some_and(|r| n.ipv4_subnets().any(|s| s == r)))
                .unwrap_or(0);
            let kept = ours.swap_remove(keep);
            for network in &ours {
                self.remove_network(api, &network.id, cancel)?;
            }
            return Ok(kept);
        }
        ours.pop()
            .ok_or_else(|| ComputeError::retryable("docker_api", Some(404)))
    }

    /// `POST /networks/create` for the Namespace's bridge on `subnet`.
    fn post_network(
        &self,
        api: &str,
        name: &str,
        namespace: &NamespaceSpec,
        subnet: Ipv4Cidr,
        cancel: &CancelToken,
    ) -> Result<Created, ComputeError> {
        let body = json!({
            "Name": name,
            "Driver": "bridge",
            "CheckDuplicate": true,
            "IPAM": {
                "Driver": "default",
                "Config": [{ "Subnet": subnet.to_string() }],
            },
            "Labels": namespace_labels(namespace),
        });
        let reply = self.send(
            Request::Post(body),
            &format!("{api}/networks/create"),
            cancel,
        )?;
        match reply.status {
            409 => Ok(Created::Done),
            _ if reply.is_success() => Ok(Created::Done),
            _ if is_subnet_taken(&reply) => Ok(Created::SubnetTaken),
            status => Err(rejected(status)),
        }
    }

    /// `GET /networks`: every network on the daemon, ours or not.
    fn all_networks(
        &self,
        api: &str,
        cancel: &CancelToken,
    ) -> Result<Vec<NetworkInfo>, ComputeError> {
        let reply = self.send(Request::Get, &format!("{api}/networks"), cancel)?;
        if !reply.is_success() {
            return Err(rejected(reply.status));
        }
        decode(&reply)
    }

    /// Containers carrying every one of `labels` (the daemon ANDs label filters).
    fn list_containers(
        &self,
        api: &str,
        labels: &[(&str, &str)],
        cancel: &CancelToken,
    ) -> Result<Vec<ContainerInfo>, ComputeError> {
        let path = format!(
            "{api}/containers/json?all=true&filters={}",
            label_filter(labels)
        );
        let reply = self.send(Request::Get, &path, cancel)?;
        if !reply.is_success() {
            return Err(rejected(reply.status));
        }
        decode(&reply)
    }

    /// Networks carrying every one of `labels`.
    fn list_networks(
        &self,
        api: &str,
        labels: &[(&str, &str)],
        cancel: &CancelToken,
    ) -> Result<Vec<NetworkInfo>, ComputeError> {
        let path = format!("{api}/networks?filters={}", label_filter(labels));
        let reply = self.send(Request::Get, &path, cancel)?;
        if !reply.is_success() {
            return Err(rejected(reply.status));
        }
        decode(&reply)
    }

    /// Force-removes a container and its anonymous volumes. 404 (gone) and 409 (removal
    /// already in progress) are fine: callers re-list to see what remains.
    fn remove_container(
        &self,
        api: &str,
        id: &str,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let path = format!("{api}/containers/{}?force=true&v=true", encode(id));
        let reply = self.send(Request::Delete, &path, cancel)?;
        match reply.status {
            404 | 409 => Ok(()),
            _ if reply.is_success() => Ok(()),
            status => Err(rejected(status)),
        }
    }

    /// Removes a network. 404 (gone) and 409 (endpoints still attached) are fine: callers
    /// re-list to see what remains.
    fn remove_network(
        &self,
        api: &str,
        id: &str,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let path = format!("{api}/networks/{}", encode(id));
        let reply = self.send(Request::Delete, &path, cancel)?;
        match reply.status {
            404 | 409 => Ok(()),
            _ if reply.is_success() => Ok(()),
            status => Err(rejected(status)),
        }
    }

    /// Force-removes every container carrying all of `labels`; idempotent. Callers always
    /// include this installation's and the Namespace's labels: an object of another
    /// installation is never touched, whatever else it carries.
    fn remove_labelled_containers(
        &self,
        labels: &[(&str, &str)],
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let api = self.api(cancel)?;
        for container in self.list_containers(&api, labels, cancel)? {
            self.remove_container(&api, &container.id, cancel)?;
        }
        Ok(())
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
mod tests {
    use super::*;

    #[test]
    fn docker_host_must_be_a_unix_socket_path() {
        assert!(DockerDriver::new("unix:///var/run/docker.sock").is_ok());
        for host in [
            "tcp://localhost:2375",
            "unix://relative.sock",
            "/var/run/docker.sock",
        ] {
            let e = DockerDriver::new(host).err().expect("refused");
            assert_eq!(
                e.kind(),
                &ComputeErrorKind::Permanent("INVALID_DOCKER_HOST".into())
            );
        }
    }

    #[test]
    fn api_versions_are_parsed_and_capped() {
        assert_eq!(parse_api_version("1.45"), Some((1, 45)));
        assert_eq!(parse_api_version("junk"), None);
        assert_eq!((1, 45).min(MAX_API_VERSION), (1, 41));
        assert_eq!((1, 40).min(MAX_API_VERSION), (1, 40));
        assert_eq!((2, 0).min(MAX_API_VERSION), (1, 41));
    }

    fn reply(status: u16, body: &str) -> Reply {
        Reply {
            status,
            api_version: None,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn subnet_refusals_are_told_from_other_refusals() {
        let overlap = r#"{"message":"Pool overlaps with other one on this address space"}"#;
        assert!(is_subnet_taken(&reply(403, overlap)));
        assert!(is_subnet_taken(&reply(403, "")));
        assert!(is_subnet_taken(&reply(400, overlap)));
        assert!(is_subnet_taken(&reply(
            400,
            r#"{"message":"invalid pool request: pool overlaps with other one"}"#
        )));
        assert!(!is_subnet_taken(&reply(
            400,
            r#"{"message":"invalid name"}"#
        )));
        // Default-pool exhaustion is not a taken subnet of ours.
        assert!(!is_subnet_taken(&reply(
            400,
            r#"{"message":"could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network"}"#
        )));
        assert!(!is_subnet_taken(&reply(404, overlap)));
        assert!(!is_subnet_taken(&reply(500, overlap)));
    }

    #[test]
    fn listed_networks_yield_their_ipv4_subnets() {
        let listing = reply(
            200,
            r#"[{"Id":"a","Name":"host","IPAM":{"Driver":"default","Config":[]}},
                {"Id":"b","Name":"bridge","IPAM":{"Config":[{"Subnet":"172.17.0.0/16","Gateway":"172.17.0.1"}]}},
                {"Id":"c","Name":"v6","IPAM":{"Config":[{"Subnet":"fd00::/64"},{"Subnet":"172.16.4.0/24"}]}},
                {"Id":"d","Name":"odd","IPAM":{"Config":null}},
                {"Id":"e","Name":"bare"}]"#,
        );
        let networks: Vec<NetworkInfo> = decode(&listing).unwrap();
        let subnets: Vec<String> = networks
            .iter()
            .flat_map(NetworkInfo::ipv4_subnets)
            .map(|s| s.to_string())
            .collect();
        assert_eq!(subnets, ["172.17.0.0/16", "172.16.4.0/24"]);
    }

    #[test]
    fn the_default_pool_can_be_replaced() {
        let pool: SubnetPool = "10.77.0.0/16:26".parse().unwrap();
        let driver = DockerDriver::new("unix:///var/run/docker.sock").unwrap();
        assert_eq!(driver.subnet_pool, SubnetPool::default());
        assert_eq!(driver.with_subnet_pool(pool).subnet_pool, pool);
    }

    #[test]
    fn statuses_are_classified() {
        assert!(rejected(429).is_transient());
        assert!(rejected(503).is_transient());
        assert_eq!(
            rejected(400).kind(),
            &ComputeErrorKind::Permanent("DOCKER_REQUEST_REJECTED".into())
        );
        assert_eq!(rejected(400).status(), Some(400));
    }

    #[test]
    fn malformed_answers_are_invalid_observations() {
        let reply = Reply {
            status: 200,
            api_version: None,
            body: b"{not json".to_vec(),
        };
        let e = decode::<Vec<ContainerInfo>>(&reply).err().expect("refused");
        assert_eq!(e.class(), "decode");
        assert_eq!(
            e.kind(),
            &ComputeErrorKind::Permanent("INVALID_DRIVER_OBSERVATION".into())
        );
    }

    #[test]
    fn filters_are_encoded() {
        assert_eq!(
            label_filter(&[("occ.namespace", "n-1")]),
            "%7B%22label%22%3A%5B%22occ.namespace%3Dn-1%22%5D%7D"
        );
    }
}
