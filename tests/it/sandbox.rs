//! The Sandbox Driver (SPEC §15, S1-S4): start-up, facets pinned at admission and enforced by
//! the Kubernetes driver, and an Agent's sandbox policy. End-to-end tests run `occ-worker` with
//! `OCC_INSTALLATION_CONFIG` against the API server fake and assert the exact objects it holds.

use crate::kube_e2e::{kube_env, scratch};
use crate::kube_fake::{FakeOptions, KubeFake};
use crate::support::{wait_for, worker_command, TestDb, WorkerProcess};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// The Installation file selecting a sandbox with `facets` (and the RuntimeClass `gvisor` when
/// `runtime-class` is one), and `ceiling`.
fn installation_file(dir: &Path, facets: &[&str], ceiling: Value) -> String {
    let mut sandbox =
        json!({"id": "sandbox-1", "implementation": "kubernetes-sandbox", "facets": facets});
    if facets.contains(&"runtime-class") {
        sandbox["runtimeClassName"] = json!("gvisor");
    }
    let path = dir.join("installation.json");
    std::fs::write(
        &path,
        json!({"sandbox": sandbox, "sandboxNetworkPolicyCeiling": ceiling}).to_string(),
    )
    .unwrap();
    path.display().to_string()
}

fn fake() -> KubeFake {
    KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(20),
        ..FakeOptions::default()
    })
}

fn runtime_class(fake: &KubeFake, name: &str) {
    fake.put_object(
        "/apis/node.k8s.io/v1/runtimeclasses",
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": name}, "handler": "runsc"}),
    );
}

#[test]
fn s1_preflight_refuses_a_missing_runtime_class_in_one_line_and_check_names_the_driver() {
    let fake = fake();
    let db = TestDb::bootstrapped();
    let dir = scratch("sandbox-s1-preflight");
    let mut env = kube_env(&db, &fake, &dir, 1);
    let file = installation_file(&dir, &["runtime-class", "read-only-root"], json!([]));
    env.push(("OCC_INSTALLATION_CONFIG", file));
    let out = worker_command(&["check", "--json"], &env).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr
            .contains("compute preflight failed: compute refused: SANDBOX_RUNTIME_CLASS_NOT_FOUND"),
        "{stderr}"
    );
    assert!(fake
        .requests()
        .iter()
        .any(|r| r.method == "GET" && r.path == "/apis/node.k8s.io/v1/runtimeclasses/gvisor"));
    // With the RuntimeClass, `check` passes and names the Sandbox Driver.
    runtime_class(&fake, "gvisor");
    let out = worker_command(&["check", "--json"], &env).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["sandboxDriverId"], "sandbox-1");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn s1_worker_started_carries_the_sandbox_driver_id() {
    let fake = fake();
    let db = TestDb::bootstrapped();
    let dir = scratch("sandbox-s1-started");
    let mut env = kube_env(&db, &fake, &dir, 1);
    env.push((
        "OCC_INSTALLATION_CONFIG",
        installation_file(&dir, &["read-only-root"], json!([])),
    ));
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    wait_for("started", Duration::from_secs(30), || {
        worker.has_event("worker.started")
    });
    let started = worker
        .events()
        .into_iter()
        .find(|e| e["event"] == "worker.started")
        .unwrap();
    assert_eq!(started["sandboxDriverId"], "sandbox-1");
    assert_eq!(started["computeDriverId"], "kubernetes");
    // No RuntimeClass is read without the facet.
    assert!(!fake
        .requests()
        .iter()
        .any(|r| r.path.contains("runtimeclasses")));
    drop(worker);
    let _ = std::fs::remove_dir_all(dir);
}
