//! The Docker Engine API calls of `DockerDriver` (SPEC C2): one request over the Unix socket
//! bounded by the request timeout and interrupted by the pass's cancellation (`send`), the API
//! version negotiation, and the network and container reads and writes the contract is made
//! of. They never log or keep a response body: errors carry codes, classes and statuses.

use super::*;

impl DockerDriver {
    /// Sends one request: a cancellation point, bounded by the request timeout and
    /// interrupted when `cancel` is (the token is current on this thread meanwhile).
    pub(super) fn send(
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
    pub(super) fn ping(&self, cancel: &CancelToken) -> Result<String, ComputeError> {
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
    pub(super) fn api(&self, cancel: &CancelToken) -> Result<String, ComputeError> {
        match self.api_prefix.get() {
            Some(prefix) => Ok(prefix.clone()),
            None => self.ping(cancel),
        }
    }

    /// Inspects a network by name or id; `None` when the daemon has no such network.
    pub(super) fn inspect_network(
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
    pub(super) fn create_network(
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
    pub(super) fn keep_one(
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
    pub(super) fn post_network(
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
    pub(super) fn all_networks(
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
    pub(super) fn list_containers(
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
    pub(super) fn list_networks(
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
    pub(super) fn remove_container(
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
    pub(super) fn remove_network(
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
    pub(super) fn remove_labelled_containers(
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
