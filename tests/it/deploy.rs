//! The in-cluster manifests (`deploy/kubernetes`), checked against the worker they run: every
//! file parses, the kustomization names files that exist, the driver file is one the driver
//! accepts, the environment is one production mode starts with and names only variables the
//! worker reads, the ClusterRole grants what preflight reviews, and the probes ask paths the
//! health server answers with 200.

use crate::support::LoggedOutput;
use crate::support::{http_get as get, TestDb};
use occ_worker::compute::kubernetes::driver::ACCESS;
use occ_worker::compute::kubernetes::settings::Settings;
use occ_worker::config::{Config, Mode};
use occ_worker::runtime::Progress;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

/// Every document of a YAML file, as JSON values.
fn documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir().join(file)).expect(file);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{file}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

// The kustomization's files exist and parse; the driver file is valid for the driver.
#[test]
fn deploy_manifests_parse_and_the_kustomization_names_real_files() {
    let kustomization = &documents("kustomization.yaml")[0];
    let mut files: Vec<String> = Vec::new();
    for resource in kustomization["resources"].as_array().expect("resources") {
        files.push(resource.as_str().unwrap().to_string());
    }
    for file in &files {
        assert!(!documents(file).is_empty(), "{file} has objects");
    }
    let generated = &kustomization["configMapGenerator"][0];
    let driver_file = generated["files"][0].as_str().expect("driver file");
    let driver = std::fs::read_to_string(dir().join(driver_file)).expect("driver.json");
    let settings = Settings::parse(&driver).expect("the driver file is valid");
    // The tenant RoleBinding template (per tenant namespace, so outside the kustomization)
    // has the name the driver waits for.
    let tenant = documents("tenant-rolebinding.yaml");
    assert_eq!(
        kind(&tenant, "RoleBinding")["metadata"]["name"],
        settings.tenant_role_binding.as_str()
    );

    // The Deployment mounts the generated ConfigMap and runs as rbac.yaml's ServiceAccount.
    let worker = documents("worker.yaml");
    let deployment = kind(&worker, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["configMap"]["name"], generated["name"]);
    let rbac = documents("rbac.yaml");
    let account = kind(&rbac, "ServiceAccount");
    assert_eq!(pod["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(
        kind(&rbac, "ClusterRoleBinding")["subjects"][0]["name"],
        account["metadata"]["name"]
    );
    // The config mount is where OCC_KUBERNETES_CONFIG points.
    let mount = container(deployment)["volumeMounts"][0]["mountPath"]
        .as_str()
        .unwrap();
    let config = env(deployment)
        .into_iter()
        .find(|(name, _)| name == "OCC_KUBERNETES_CONFIG")
        .and_then(|(_, value)| value)
        .expect("OCC_KUBERNETES_CONFIG");
    assert_eq!(config, format!("{mount}/{driver_file}"));
    // The image scripts/build-image tags with the version the binary reports, pinned with a
    // pull policy (never `latest`), the kustomization's tag the same; two replicas, a budget
    // that keeps one.
    let version = env!("CARGO_PKG_VERSION");
    let reported = std::process::Command::new(env!("CARGO_BIN_EXE_occ-worker"))
        .arg("--version")
        .logged_output("deploy.occ-worker")
        .expect("occ-worker --version");
    assert_eq!(
        String::from_utf8_lossy(&reported.stdout).trim(),
        format!("occ-worker {version}")
    );
    assert_eq!(
        container(deployment)["image"],
        format!("occ-worker:{version}").as_str()
    );
    assert_eq!(container(deployment)["imagePullPolicy"], "IfNotPresent");
    assert_eq!(kustomization["images"][0]["name"], "occ-worker");
    assert_eq!(kustomization["images"][0]["newTag"], version);
    let build = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/build-image"),
    )
    .unwrap();
    assert!(
        build.contains("version=$(\"$bin\" --version | awk '{print $2}')")
            && build.contains("docker tag \"$image\" \"${image%:*}:$version\""),
        "scripts/build-image tags the version the binary reports"
    );
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        kind(&worker, "PodDisruptionBudget")["spec"]["minAvailable"],
        1
    );
    // Non-root, read-only root, nothing to escalate.
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let security = &container(deployment)["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(container(deployment)["resources"]["limits"]["memory"].is_string());
}

// W8: the ClusterRole grants every (verb, group, resource) preflight reviews (the driver's
// `ACCESS`, `pods/proxy` for the held code's read included), and nothing more but the
// SelfSubjectAccessReviews preflight itself creates.
#[test]
fn deploy_rbac_grants_exactly_what_preflight_reviews() {
    let rbac = documents("rbac.yaml");
    let mut granted = BTreeSet::new();
    for rule in kind(&rbac, "ClusterRole")["rules"]
        .as_array()
        .expect("rules")
    {
        let strings = |field: &str| -> Vec<String> {
            rule[field]
                .as_array()
                .unwrap_or_else(|| panic!("{field}: {rule}"))
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                for verb in strings("verbs") {
                    granted.insert((verb, group.clone(), resource.clone()));
                }
            }
        }
    }
    let mut reviewed: BTreeSet<(String, String, String)> = ACCESS
        .iter()
        .map(|(v, g, r)| (v.to_string(), g.to_string(), r.to_string()))
        .collect();
    assert!(reviewed.contains(&("get".into(), "".into(), "pods/proxy".into())));
    reviewed.insert((
        "create".into(),
        "authorization.k8s.io".into(),
        "selfsubjectaccessreviews".into(),
    ));
    assert_eq!(granted, reviewed);
}

/// The container's environment: (name, literal value or None for a reference).
fn env(deployment: &Value) -> Vec<(String, Option<String>)> {
    container(deployment)["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().map(str::to_string),
            )
        })
        .collect()
}

// W8: the manifest's environment is one production mode starts with, and every variable it
// sets is one the worker reads.
#[test]
fn deploy_environment_is_read_by_the_worker_and_starts_production() {
    let worker = documents("worker.yaml");
    let deployment = kind(&worker, "Deployment");
    let set = env(deployment);
    let asked = Mutex::new(BTreeSet::new());
    let lookup = |name: &str| -> Option<String> {
        asked.lock().insert(name.to_string());
        set.iter().find(|(n, _)| n == name).map(|(n, value)| {
            match value {
                Some(value) => value.clone(),
                // The Secret's value: what an operator would put there.
                None => {
                    assert_eq!(
                        n, "OCC_DATABASE_URL",
                        "only the database URL is a reference"
                    );
                    "postgres://occ@db.example:5432/occ?sslmode=verify-full".to_string()
                }
            }
        })
    };
    let config = Config::from_lookup(lookup).expect("production starts with this environment");
    assert_eq!(config.mode, Mode::Production);
    let asked = asked.into_inner();
    for (name, _) in &set {
        // RUST_LOG is env_logger's.
        assert!(
            asked.contains(name) || name == "RUST_LOG",
            "{name} is set but the worker never reads it"
        );
    }
    // The probes' port is the health server's.
    let port = container(deployment)["ports"][0]["containerPort"].as_u64();
    assert_eq!(Some(u64::from(config.http_addr.port())), port);
    assert!(config.http_addr.ip().is_unspecified(), "kubelet reaches it");
}

// The probes ask paths the health server answers: 200 from a live, ready worker.
#[test]
fn deploy_probes_ask_paths_the_health_server_answers() {
    let worker = documents("worker.yaml");
    let deployment = kind(&worker, "Deployment");
    let db = TestDb::bootstrapped();
    let progress = Arc::new(Progress::default());
    progress.tick();
    let server = crate::health::health_server(&db, 2, progress);
    for probe in ["livenessProbe", "readinessProbe"] {
        let spec = &container(deployment)[probe]["httpGet"];
        assert_eq!(spec["port"], container(deployment)["ports"][0]["name"]);
        let path = spec["path"].as_str().expect("path");
        crate::support::wait_for(
            &format!("{probe} {path} to answer 200"),
            Duration::from_secs(10),
            || get(server.addr, path) == Some(200),
        );
    }
    assert_eq!(get(server.addr, "/no-such-path"), Some(404));
}

// docs/operating.md, "Upgrading": a new Pod's worker starts only after its init container ran
// `migrate` with the same image on the same database (the migration lock makes it once per
// rollout), and the rolling update stops an old Pod only once a new one is ready.
#[test]
fn deploy_migrates_in_an_init_container_before_the_worker_claims() {
    let worker = documents("worker.yaml");
    let deployment = kind(&worker, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let init = pod["initContainers"].as_array().expect("an init container");
    assert_eq!(init.len(), 1, "{init:?}");
    let migrate = &init[0];
    assert_eq!(migrate["args"], serde_json::json!(["migrate"]));
    assert_eq!(migrate["image"], container(deployment)["image"]);
    let url = |c: &Value| {
        c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "OCC_DATABASE_URL")
            .map(|e| e["valueFrom"].clone())
    };
    assert!(url(migrate).is_some());
    assert_eq!(url(migrate), url(container(deployment)));
    assert_eq!(container(deployment)["args"], serde_json::json!(["run"]));
    let rolling = &deployment["spec"]["strategy"]["rollingUpdate"];
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(rolling["maxUnavailable"], 0);
}
