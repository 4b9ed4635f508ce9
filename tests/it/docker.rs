//! The Docker Compute Driver against the real Docker Engine (SPEC C2).
//!
//! Tests that need a daemon skip with a notice when `/var/run/docker.sock` is missing, unless
//! `OCC_REQUIRE_DOCKER=1` (CI), which turns the skip into a failure. Fixtures are created and
//! checked with the `docker` CLI, independently of the driver; every name carries the process
//! id and a counter, and every test removes what it created.

use crate::docker_proxy::{DockerProxy, DOCKER_SOCKET};
use occ_worker::cancel::{CancelToken, Cancelled, LossCause};
use occ_worker::compute::docker::{network_name, DockerDriver, SUBNET_CONTENDED};
use occ_worker::compute::{
    AgentSpec, ComputeDriver, ComputeError, ComputeErrorKind, NamespaceObservation, NamespaceSpec,
    RevisionSpec,
};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

const IMAGE: &str = "occ-test-sleeper:latest";
const DOCKER_HOST: &str = "unix:///var/run/docker.sock";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Whether a Docker Engine is available; panics instead of skipping under
/// `OCC_REQUIRE_DOCKER=1`.
pub fn docker_available() -> bool {
    if Path::new(DOCKER_SOCKET).exists() {
        return true;
    }
    if std::env::var("OCC_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("OCC_REQUIRE_DOCKER=1 but there is no Docker Engine at {DOCKER_SOCKET}");
    }
    // libtest captures `eprintln!`; a skip must be seen, so write to the process's stderr.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "skipping: no Docker Engine at {DOCKER_SOCKET} (set OCC_REQUIRE_DOCKER=1 to fail)\n"
        )
        .as_bytes(),
    );
    false
}

/// A unique id token for this process and test.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}x{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn namespace() -> NamespaceSpec {
    NamespaceSpec {
        installation_id: unique("itinst"),
        namespace_id: unique("itns"),
        name: "test".into(),
        existing_namespace: None,
    }
}

fn revision(namespace: &NamespaceSpec) -> RevisionSpec {
    let (agent, revision) = (unique("itagent"), unique("itrev"));
    RevisionSpec {
        installation_id: namespace.installation_id.clone(),
        service_principal_id: "sp".into(),
        harness_version: "1".into(),
        execution_mode: "service".into(),
        ..crate::support::bare_revision(
            &namespace.namespace_id,
            &agent,
            (&revision, 1),
            ("h", "dedicated"),
        )
    }
}

fn driver() -> DockerDriver {
    DockerDriver::new(DOCKER_HOST).expect("driver")
}

fn permanent_code(e: &ComputeError) -> &str {
    match e.kind() {
        ComputeErrorKind::Permanent(code) => code,
        other => panic!("expected a permanent error, got {other:?}"),
    }
}

/// Runs the `docker` CLI; panics with its stderr on failure.
fn docker(args: &[&str]) -> String {
    let out = crate::support::output_ok(
        Command::new("docker").args(args),
        &format!("docker {args:?}"),
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn build_test_image() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/build-test-image");
        let status = Command::new(script).status().expect("run build-test-image");
        assert!(status.success(), "scripts/build-test-image failed");
    });
}

/// Starts a sleeper container with the given labels, attached to `network` if given.
pub fn run_container(labels: &[(&str, &str)], network: Option<&str>) -> String {
    build_test_image();
    let name = unique("occ-it-c");
    let mut args = vec!["run".to_string(), "-d".into(), "--name".into(), name];
    for (k, v) in labels {
        args.push("--label".into());
        args.push(format!("{k}={v}"));
    }
    if let Some(network) = network {
        args.push("--network".into());
        args.push(network.into());
    }
    args.push(IMAGE.into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    docker(&args)
}

fn labelled_containers(label: &str, value: &str) -> Vec<String> {
    let filter = format!("label={label}={value}");
    lines(&docker(&["ps", "-aq", "--no-trunc", "--filter", &filter]))
}

fn labelled_networks(label: &str, value: &str) -> Vec<String> {
    let filter = format!("label={label}={value}");
    lines(&docker(&[
        "network",
        "ls",
        "-q",
        "--no-trunc",
        "--filter",
        &filter,
    ]))
}

fn lines(s: &str) -> Vec<String> {
    s.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn inspect_network(name: &str) -> serde_json::Value {
    serde_json::from_str(&docker(&[
        "network",
        "inspect",
        "--format",
        "{{json .}}",
        name,
    ]))
    .expect("network inspect answers JSON")
}

/// Removes everything labelled with the Namespace, whatever the test left behind.
fn cleanup(namespace: &NamespaceSpec) {
    for id in labelled_containers("occ.namespace", &namespace.namespace_id) {
        let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    }
    for id in labelled_networks("occ.namespace", &namespace.namespace_id) {
        let _ = Command::new("docker").args(["network", "rm", &id]).output();
    }
}

/// Ensures until the Namespace is placed: another test process on the same Engine and the
/// default pool can hold the subnet this driver reserved while its create is still under way,
/// which is `NAMESPACE_SUBNET_CONTENDED`, pending, and the next pass places it (SPEC C2).
fn ensure_placed(driver: &DockerDriver, namespace: &NamespaceSpec) -> NamespaceObservation {
    let cancel = CancelToken::unbounded();
    crate::support::poll(Duration::from_secs(60), Duration::from_millis(200), || {
        let observed = driver.ensure_namespace(namespace, &cancel).expect("ensure");
        match observed.pending_reason.as_deref() {
            Some(SUBNET_CONTENDED) => None,
            _ => Some(observed),
        }
    })
    .expect("the Namespace was placed within 60 s")
}

/// Deletes until complete (bounded).
fn delete_until_complete(driver: &DockerDriver, namespace: &NamespaceSpec) {
    let cancel = CancelToken::unbounded();
    let every = Duration::from_millis(200);
    let complete = crate::support::poll(Duration::from_secs(60), every, || {
        let observed = driver.delete_namespace(namespace, &cancel).expect("delete");
        assert_eq!(observed.namespace_id, namespace.namespace_id);
        if observed.complete {
            assert_eq!(observed.pending_reason, None);
            return Some(());
        }
        let reason = observed.pending_reason.expect("a pending reason");
        assert!(
            reason == "CONTAINER_REMOVAL_PENDING" || reason == "NETWORK_REMOVAL_PENDING",
            "{reason}"
        );
        None
    });
    assert!(complete.is_some(), "delete_namespace did not complete");
}

#[test]
fn ensure_namespace_creates_a_labelled_bridge_network_idempotently() {
    if !docker_available() {
        return;
    }
    let driver = driver();
    let ns = namespace();
    let cancel = CancelToken::unbounded();
    driver.preflight(&cancel).expect("preflight");

    let observed = ensure_placed(&driver, &ns);
    assert!(observed.complete, "{observed:?}");
    assert_eq!(observed.namespace_id, ns.namespace_id);
    assert_eq!(observed.failure, None);
    assert_eq!(observed.pending_reason, None);

    let name = network_name(&ns);
    assert_eq!(
        name,
        format!("occ-{}-{}", ns.installation_id, ns.namespace_id)
    );
    let network = inspect_network(&name);
    assert_eq!(network["Driver"], "bridge");
    assert_eq!(network["Labels"]["occ.managed-by"], "occ-worker");
    assert_eq!(network["Labels"]["occ.installation"], ns.installation_id);
    assert_eq!(network["Labels"]["occ.namespace"], ns.namespace_id);
    // The subnet is one of the driver's own pool (172.16.0.0/16:24), not a default pool's.
    let subnet = network["IPAM"]["Config"][0]["Subnet"]
        .as_str()
        .expect("a subnet");
    assert!(
        subnet.starts_with("172.16.") && subnet.ends_with(".0/24"),
        "{subnet}"
    );

    let again = driver.ensure_namespace(&ns, &cancel).expect("ensure again");
    assert_eq!(again, observed);
    assert_eq!(inspect_network(&name)["Id"], network["Id"], "same network");
    assert_eq!(
        labelled_networks("occ.namespace", &ns.namespace_id).len(),
        1
    );

    delete_until_complete(&driver, &ns);
    assert!(labelled_networks("occ.namespace", &ns.namespace_id).is_empty());
    cleanup(&ns);
}

#[test]
fn delete_namespace_removes_labelled_containers_and_the_network() {
    if !docker_available() {
        return;
    }
    let driver = driver();
    let ns = namespace();
    let cancel = CancelToken::unbounded();
    ensure_placed(&driver, &ns);
    let name = network_name(&ns);
    let labels = [
        ("occ.managed-by", "occ-worker"),
        ("occ.installation", ns.installation_id.as_str()),
        ("occ.namespace", ns.namespace_id.as_str()),
    ];
    for _ in 0..3 {
        run_container(&labels, Some(&name));
    }
    assert_eq!(
        labelled_containers("occ.namespace", &ns.namespace_id).len(),
        3
    );

    delete_until_complete(&driver, &ns);
    assert!(labelled_containers("occ.namespace", &ns.namespace_id).is_empty());
    assert!(labelled_networks("occ.namespace", &ns.namespace_id).is_empty());

    // Idempotent: deleting what is gone completes at once.
    let observed = driver.delete_namespace(&ns, &cancel).expect("delete again");
    assert!(observed.complete);
    cleanup(&ns);
}

#[test]
fn same_named_unlabelled_network_is_a_name_conflict_and_survives_delete() {
    if !docker_available() {
        return;
    }
    let driver = driver();
    let ns = namespace();
    let name = network_name(&ns);
    // An explicit subnet outside every pool in use, so the test does not depend on how much
    // of the daemon's default pools other runs on the same daemon hold.
    let subnet = format!("10.231.{}.0/24", std::process::id() % 256);
    docker(&["network", "create", "--subnet", &subnet, &name]);
    let cancel = CancelToken::unbounded();

    let e = driver.ensure_namespace(&ns, &cancel).unwrap_err();
    assert_eq!(permanent_code(&e), "NAMESPACE_NAME_CONFLICT");

    // Deletion goes by labels: the stranger's network is left alone.
    let observed = driver.delete_namespace(&ns, &cancel).expect("delete");
    assert!(observed.complete);
    assert_eq!(inspect_network(&name)["Name"], name.as_str());
    docker(&["network", "rm", &name]);
}

#[test]
fn stop_retire_and_credential_deletion_remove_labelled_containers() {
    if !docker_available() {
        return;
    }
    let driver = driver();
    let ns = namespace();
    let rev = revision(&ns);
    let cancel = CancelToken::unbounded();
    let by_namespace = ("occ.namespace", ns.namespace_id.as_str());
    let by_installation = ("occ.installation", ns.installation_id.as_str());

    run_container(
        &[
            by_installation,
            by_namespace,
            ("occ.revision", &rev.revision_id),
        ],
        None,
    );
    driver.stop_revision(&rev, &cancel).expect("stop");
    assert!(labelled_containers("occ.revision", &rev.revision_id).is_empty());
    driver.stop_revision(&rev, &cancel).expect("stop again");

    run_container(
        &[
            by_installation,
            by_namespace,
            ("occ.revision", &rev.revision_id),
        ],
        None,
    );
    driver.retire_revision(&rev, &cancel).expect("retire");
    assert!(labelled_containers("occ.revision", &rev.revision_id).is_empty());

    run_container(
        &[by_installation, by_namespace, ("occ.agent", &rev.agent_id)],
        None,
    );
    let agent = AgentSpec {
        installation_id: ns.installation_id.clone(),
        namespace_id: ns.namespace_id.clone(),
        agent_id: rev.agent_id.clone(),
        service_principal_id: "sp".into(),
    };
    driver
        .delete_agent_runtime_credentials(&agent, &cancel)
        .expect("delete credentials");
    assert!(labelled_containers("occ.agent", &rev.agent_id).is_empty());
    cleanup(&ns);
}

// C2: two installations share one Docker Engine and one Namespace id. The
// driver of installation A deletes only objects carrying A's installation label and the
// Namespace's (or revision's, or Agent's) label; B's network and containers, labelled with the
// same Namespace, revision and Agent ids, are never touched.
#[test]
fn deletion_never_touches_another_installations_objects_with_the_same_namespace_label() {
    if !docker_available() {
        return;
    }
    let driver = driver();
    let ours = namespace();
    let theirs = NamespaceSpec {
        installation_id: unique("itother"),
        ..ours.clone()
    };
    let cancel = CancelToken::unbounded();
    ensure_placed(&driver, &ours);
    ensure_placed(&driver, &theirs);
    let rev = revision(&ours);
    let their_labels = |extra: (&'static str, &str)| {
        vec![
            ("occ.managed-by", "occ-worker".to_string()),
            ("occ.installation", theirs.installation_id.clone()),
            ("occ.namespace", theirs.namespace_id.clone()),
            (extra.0, extra.1.to_string()),
        ]
    };
    let mut strangers = Vec::new();
    for extra in [
        ("occ.revision", rev.revision_id.as_str()),
        ("occ.agent", rev.agent_id.as_str()),
        ("occ.test", "plain"),
    ] {
        let labels = their_labels(extra);
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        strangers.push(run_container(&labels, Some(&network_name(&theirs))));
    }
    let mine = run_container(
        &[
            ("occ.installation", ours.installation_id.as_str()),
            ("occ.namespace", ours.namespace_id.as_str()),
            ("occ.revision", rev.revision_id.as_str()),
        ],
        Some(&network_name(&ours)),
    );

    driver.stop_revision(&rev, &cancel).expect("stop");
    driver.retire_revision(&rev, &cancel).expect("retire");
    let agent = AgentSpec {
        installation_id: ours.installation_id.clone(),
        namespace_id: ours.namespace_id.clone(),
        agent_id: rev.agent_id.clone(),
        service_principal_id: "sp".into(),
    };
    driver
        .delete_agent_runtime_credentials(&agent, &cancel)
        .expect("delete credentials");
    delete_until_complete(&driver, &ours);

    let survivors = labelled_containers("occ.installation", &theirs.installation_id);
    for id in &strangers {
        assert!(
            survivors
                .iter()
                .any(|s| s.starts_with(id.as_str()) || id.starts_with(s.as_str())),
            "another installation's container {id} was removed"
        );
    }
    assert!(
        labelled_containers("occ.installation", &ours.installation_id).is_empty(),
        "our container {mine} is still there"
    );
    assert_eq!(
        inspect_network(&network_name(&theirs))["Labels"]["occ.installation"],
        theirs.installation_id.as_str(),
        "another installation's network was removed"
    );
    assert!(labelled_networks("occ.installation", &ours.installation_id).is_empty());
    cleanup(&theirs);
}

#[test]
fn missing_socket_is_a_transient_error_not_a_panic() {
    let driver = DockerDriver::new("unix:///nonexistent/docker.sock").expect("driver");
    let cancel = CancelToken::unbounded();
    let ns = namespace();

    let e = driver.preflight(&cancel).unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(e.class(), "docker_unavailable");

    let e = driver.ensure_namespace(&ns, &cancel).unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert_eq!(e.class(), "docker_unavailable");

    let e = driver.delete_namespace(&ns, &cancel).unwrap_err();
    assert!(e.is_transient(), "{e}");
}

#[test]
fn cancelled_token_makes_no_request() {
    let proxy = DockerProxy::start();
    let driver = DockerDriver::new(&proxy.docker_host()).expect("driver");
    let ns = namespace();
    let rev = revision(&ns);
    let cancel = CancelToken::unbounded();
    cancel.cancel(LossCause::RenewalRefused);
    let cancelled = ComputeErrorKind::Cancelled(Cancelled(LossCause::RenewalRefused));

    let e = driver.preflight(&cancel).unwrap_err();
    assert_eq!(e.kind(), &cancelled);
    assert_eq!(
        driver.ensure_namespace(&ns, &cancel).unwrap_err().kind(),
        &cancelled
    );
    assert_eq!(
        driver.delete_namespace(&ns, &cancel).unwrap_err().kind(),
        &cancelled
    );
    assert_eq!(
        driver.stop_revision(&rev, &cancel).unwrap_err().kind(),
        &cancelled
    );
    assert_eq!(proxy.requests(), Vec::<String>::new(), "radio silence");
}

#[test]
fn revision_deployment_is_refused_with_harness_binding_unsupported() {
    let proxy = DockerProxy::start();
    let driver = DockerDriver::new(&proxy.docker_host()).expect("driver");
    let ns = namespace();
    let rev = revision(&ns);
    let cancel = CancelToken::unbounded();

    let e = driver.prepare_revision(&rev, &cancel).unwrap_err();
    assert_eq!(permanent_code(&e), "HARNESS_BINDING_UNSUPPORTED");
    let e = driver.activate_revision(&rev, &cancel).unwrap_err();
    assert_eq!(permanent_code(&e), "HARNESS_BINDING_UNSUPPORTED");
    assert!(!driver.policy().requires_stopped_predecessors(&rev));
    assert_eq!(driver.policy().maintenance_interval(), None);
    assert_eq!(proxy.requests(), Vec::<String>::new(), "no request");
}

#[test]
fn existing_namespace_is_unsupported() {
    let proxy = DockerProxy::start();
    let driver = DockerDriver::new(&proxy.docker_host()).expect("driver");
    let mut ns = namespace();
    ns.existing_namespace = Some("tenant-a".into());
    let e = driver
        .ensure_namespace(&ns, &CancelToken::unbounded())
        .unwrap_err();
    assert_eq!(permanent_code(&e), "EXISTING_NAMESPACE_UNSUPPORTED");
    assert_eq!(proxy.requests(), Vec::<String>::new(), "no request");
}

#[test]
fn proxy_records_the_ping_of_a_preflight_and_versioned_paths() {
    if !docker_available() {
        return;
    }
    let proxy = DockerProxy::start();
    let driver = DockerDriver::new(&proxy.docker_host()).expect("driver");
    let cancel = CancelToken::unbounded();
    driver
        .preflight(&cancel)
        .expect("preflight through the proxy");
    assert_eq!(proxy.requests(), vec!["GET /_ping".to_string()]);

    // Negotiated: at most 1.41, and used as the path prefix of later requests.
    let ns = namespace();
    driver.delete_namespace(&ns, &cancel).expect("delete");
    let requests = proxy.requests();
    assert!(requests.len() > 1, "{requests:?}");
    assert!(
        requests[1..]
            .iter()
            .all(|r| r.starts_with("GET /v1.41/") || r.starts_with("DELETE /v1.41/")),
        "{requests:?}"
    );
}

/// Creates a network through the Engine API with the daemon's duplicate-name check off: the
/// state two creates of one name racing in the daemon leave behind.
fn create_unchecked(name: &str, subnet: &str, labels: &serde_json::Value) -> String {
    let body = serde_json::json!({
        "Name": name, "CheckDuplicate": false, "Labels": labels,
        "IPAM": {"Config": [{"Subnet": subnet}]},
    });
    let out = Command::new("curl")
        .args(["-sf", "--unix-socket", "/var/run/docker.sock", "-X", "POST"])
        .args([
            "-H",
            "Content-Type: application/json",
            "-d",
            &body.to_string(),
        ])
        .arg("http://localhost/v1.41/networks/create")
        .output()
        .expect("curl");
    assert!(out.status.success(), "create {name} on {subnet}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    v["Id"].as_str().unwrap().to_string()
}

#[test]
fn c2_two_raced_networks_of_one_namespace_are_reduced_to_the_reserved_one() {
    // C2: under load a create that outlived its request and the next pass's create both
    // landed (Docker's duplicate-name check is not atomic); `docker network inspect NAME` then
    // fails as ambiguous. The next ensure keeps the network on the reserved subnet only.
    if !docker_available() {
        return;
    }
    use occ_worker::compute::subnet::MemoryLedger;
    use occ_worker::compute::{SubnetLedger, SubnetPool};
    let ns = namespace();
    let _leftovers =
        crate::support::DockerLeftovers(vec![format!("occ.namespace={}", ns.namespace_id)]);
    let pool: SubnetPool = "10.241.0.0/16:24".parse().unwrap();
    let driver = DockerDriver::new(DOCKER_HOST)
        .expect("driver")
        .with_subnet_pool(pool);
    let name = network_name(&ns);
    let labels = serde_json::json!({
        "occ.managed-by": "occ-worker",
        "occ.installation": ns.installation_id,
        "occ.namespace": ns.namespace_id,
    });
    // The ledger reserves the pool's lowest subnet; the stray copy sits on the next one.
    let kept = "10.241.0.0/24".to_string();
    let stray = "10.241.1.0/24".to_string();
    create_unchecked(&name, &stray, &labels);
    create_unchecked(&name, &kept, &labels);
    let ledger = MemoryLedger::default();
    let reserved = ledger
        .namespace(&ns.namespace_id)
        .reserve(&pool, &[])
        .unwrap();
    assert_eq!(reserved.map(|s| s.to_string()), Some(kept.clone()));

    let observed = driver
        .ensure_namespace_reserving(
            &ns,
            &ledger.namespace(&ns.namespace_id),
            &CancelToken::unbounded(),
        )
        .expect("ensure");
    assert!(observed.complete, "{observed:?}");
    let left = labelled_networks("occ.namespace", &ns.namespace_id);
    assert_eq!(left.len(), 1, "one network is left");
    let network = inspect_network(&name);
    assert_eq!(
        network["IPAM"]["Config"][0]["Subnet"], kept,
        "the one on the reserved subnet"
    );
}

// SPEC E5, §13: Docker attaches no credential source and has no `withdraw_credential_source`,
// so every withdrawal on it fails for good, with no request to the Engine.
#[test]
fn e5_docker_answers_credential_withdrawal_unsupported() {
    use occ_worker::compute::{credential_withdrawal_unsupported, CredentialAttachment};
    let driver = DockerDriver::new(DOCKER_HOST).unwrap();
    assert!(driver.credential_gateway().is_none());
    let source = CredentialAttachment {
        source_id: "gh-tool".into(),
        kind: "tool".into(),
        harness: false,
        backend_ref: "ns/github/token".into(),
    };
    for recheck in [false, true] {
        // Without a gateway the worker answers as it does for every such driver.
        let e = driver
            .credential_gateway()
            .map_or_else(
                || Err(credential_withdrawal_unsupported()),
                |g| {
                    g.withdraw_credential_source(
                        &revision(&namespace()),
                        &source,
                        recheck,
                        &CancelToken::unbounded(),
                    )
                },
            )
            .unwrap_err();
        assert_eq!(
            e.kind(),
            &ComputeErrorKind::Permanent("CREDENTIAL_WITHDRAWAL_UNSUPPORTED".into())
        );
    }
}
