//! Repository credentials end to end on Kubernetes (SPEC §19: G8, G11, G12, G19, G22): a real
//! `occ-worker run` process with the Kubernetes Compute Driver against the API server fake over
//! TLS, the reference sender `occ-git-sender` as its repository sender, driven through the
//! operator CLI as an operator would.
//!
//! The operator creates the Secrets in the Agent's Kubernetes namespace and names them in the
//! sender's policy file; the Namespace is granted two repositories and an Agent deployed with
//! both. The fake's kubelet resolves every `secretKeyRef`, so the Harness only goes ready when
//! the material the worker attached names the operator's Secret and key. Stopping the Agent
//! closes both sessions before the runtime stops. No Secret value reaches any log line. A worker
//! killed between a session write and its answer leaves a row the next worker opens again with
//! the same admission (G19), and the docs/kubernetes.md step runs as written against the fake.
//! The issue's walk-through runs it all on two workers: a kill mid-`open`, the deadline passing
//! (G14), a standing approval removed (G15) and both Agents deleted (G13).

use crate::agent::create_agent;
use crate::kube_e2e::{k8s_namespace, kube_env, ready_namespaces, scratch};
use crate::kube_fake::tls::{leaf, new_ca};
use crate::kube_fake::{FakeOptions, KubeFake};
use crate::support::{wait_for, wait_value, work_state, worker_command, Env, WorkerProcess};
use base64::Engine;
use rcgen::{ExtendedKeyUsagePurpose, SanType};
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

const APP: &str = "github.com/acme/app";
const DOCS: &str = "github.com/acme/docs";
/// What the operator's Secrets hold: it must appear in no log line of the worker or the sender.
/// The planted value: a canary (tests/canary.rs) the suite's log scan looks for.
fn git_token() -> &'static str {
    static VALUE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VALUE.get_or_init(|| crate::support::canary("git-token"))
}

/// `occ-worker --json admin …` with `env`; its JSON answer.
fn admin(env: &Env, args: &[&str]) -> Value {
    crate::support::json_ok(
        &mut worker_command(&[&["--json", "admin"], args].concat(), env),
        &format!("occ-worker admin {args:?}"),
    )
}

/// `occ-git-sender` on a free loopback port serving `policy` with a certificate of a CA made
/// for this run (written to `dir/sender-ca.pem`): the process and its address once it listens.
pub fn start_git_sender(dir: &Path, policy: &Path) -> (WorkerProcess, String) {
    let ca = new_ca("occ-git-sender-e2e-ca");
    let (cert, key) = leaf(
        &ca,
        "occ-git-sender",
        vec![SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST))],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    std::fs::write(dir.join("sender-ca.pem"), ca.0.pem()).unwrap();
    std::fs::write(dir.join("sender-cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("sender-key.pem"), key.serialize_pem()).unwrap();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_occ-git-sender"))
        .args(["--listen", "127.0.0.1:0", "--policy"])
        .arg(policy)
        .arg("--cert")
        .arg(dir.join("sender-cert.pem"))
        .arg("--key")
        .arg(dir.join("sender-key.pem"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sender = WorkerProcess::capture(child);
    let addr = wait_value("occ-git-sender listening", Duration::from_secs(30), || {
        sender
            .events()
            .iter()
            .find(|e| e["event"] == "sender.listening")
            .and_then(|e| e["addr"].as_str().map(str::to_string))
    });
    (sender, addr)
}

/// Stores the operator's Secret `name` with `key` holding `value` in Kubernetes namespace `ns`.
pub fn put_secret(fake: &KubeFake, ns: &str, name: &str, key: &str, value: &str) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(value);
    fake.put_object(
        &format!("/api/v1/namespaces/{ns}/secrets"),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": ns},
            "type": "Opaque",
            "data": {key: encoded},
        }),
    );
}

/// The Git environment (`OCC_GIT_…`) of every container of a Pod template or Pod spec, as
/// `NAME=value` or `NAME=secret/key`, in order.
fn git_env(spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        for e in c["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or("");
            if !name.starts_with("OCC_GIT_") {
                continue;
            }
            match e["valueFrom"].get("secretKeyRef") {
                Some(r) => out.push(format!(
                    "{name}={}/{}",
                    r["name"].as_str().unwrap_or(""),
                    r["key"].as_str().unwrap_or("")
                )),
                None => out.push(format!("{name}={}", e["value"].as_str().unwrap_or(""))),
            }
        }
    }
    out
}

/// Whether `o` is a Harness object of revision `rev` in namespace `ns`.
fn harness_of(o: &Value, ns: &str, rev: &str) -> bool {
    let labels = &o["metadata"]["labels"];
    o["metadata"]["namespace"] == ns
        && labels["occ.revision"] == rev
        && labels["occ.component"] == "harness"
}

/// The Git environment of the revision's Harness Deployment template and of each of its Pods.
fn harness_git_env(fake: &KubeFake, ns: &str, rev: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let deployment = fake
        .objects("deployments")
        .into_iter()
        .find(|d| harness_of(d, ns, rev))
        .map(|d| git_env(&d["spec"]["template"]["spec"]))
        .unwrap_or_default();
    let pods = fake
        .objects("pods")
        .into_iter()
        .filter(|p| harness_of(p, ns, rev))
        .map(|p| git_env(&p["spec"]))
        .collect();
    (deployment, pods)
}

/// `admin repository sessions NS AGENT`: (REF, phase, session id, admission id) per session,
/// sorted by REF then admission id.
fn sessions(env: &Env, ns: &str, agent: &str) -> Vec<(String, String, String, String)> {
    let listed = admin(env, &["repository", "sessions", ns, agent]);
    let mut rows: Vec<(String, String, String, String)> = listed
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|s| {
            let text = |k: &str| s[k].as_str().unwrap_or("").to_string();
            (
                text("repositoryRef"),
                text("phase"),
                text("sessionId"),
                text("admissionId"),
            )
        })
        .collect();
    rows.sort_by(|a, b| (&a.0, &a.3).cmp(&(&b.0, &b.3)));
    rows
}

/// The sender's `sender.call` lines of `call`: (admission id, REF, outcome).
fn sender_calls(sender: &WorkerProcess, call: &str) -> Vec<(String, String, Value)> {
    sender
        .events()
        .into_iter()
        .filter(|e| e["event"] == "sender.call" && e["call"] == call)
        .map(|e| {
            (
                e["admissionId"].as_str().unwrap_or("").to_string(),
                e["repositoryRef"].as_str().unwrap_or("").to_string(),
                e["outcome"].clone(),
            )
        })
        .collect()
}

fn wait_ended(c: &mut postgres::Client, key: &str) -> (String, Option<String>) {
    let mut last = (String::new(), None);
    wait_for(key, Duration::from_secs(120), || {
        last = work_state(c, key);
        matches!(last.0.as_str(), "succeeded" | "failed_permanent")
    });
    last
}

/// A Kubernetes fake that resolves `secretKeyRef`s, a ready Namespace with the harness key's
/// Secret, the Agent `helper`, `occ-git-sender` serving a policy of APP and DOCS, and an
/// Installation configuration selecting it: everything an operator sets up before deploying.
pub struct GitCluster {
    pub fake: KubeFake,
    pub db: crate::support::TestDb,
    pub env: Env,
    pub dir: std::path::PathBuf,
    /// `occ-git-sender`, until a test takes it to read all it wrote.
    pub sender: Option<WorkerProcess>,
    pub ns: String,
    pub k8s: String,
    pub agent: String,
}

impl GitCluster {
    /// Everything before a worker runs, with `occ-git-sender` serving a policy of APP and DOCS
    /// (`git-acme-app`, `git-acme-docs`, key `token`); the test starts its workers with `env`.
    pub fn new(name: &str) -> GitCluster {
        GitCluster::with_interval(name, None)
    }

    /// `new`, the cleanup interval (and so a revision's maintenance, SPEC G9) `seconds`.
    pub fn with_interval(name: &str, seconds: Option<u64>) -> GitCluster {
        let dir = scratch(name);
        let policy = dir.join("git-policy.json");
        std::fs::write(
            &policy,
            json!({"repositories": {
                APP: {"secret": "git-acme-app", "key": "token"},
                DOCS: {"secret": "git-acme-docs", "key": "token"},
            }})
            .to_string(),
        )
        .unwrap();
        let (sender, addr) = start_git_sender(&dir, &policy);
        GitCluster::with_sender(dir, Some(sender), &format!("https://{addr}"), 5, seconds)
    }

    /// Everything before a worker runs, with the sender at `url` whose CA is
    /// `dir/sender-ca.pem`, called with `timeout_seconds`, and the cleanup interval
    /// `maintenance_seconds` when given (SPEC G6; 30 s without).
    pub fn with_sender(
        dir: std::path::PathBuf,
        sender: Option<WorkerProcess>,
        url: &str,
        timeout_seconds: u64,
        maintenance_seconds: Option<u64>,
    ) -> GitCluster {
        let fake = KubeFake::start(FakeOptions {
            pod_start: Duration::from_millis(20),
            pod_termination: Duration::from_millis(50),
            terminating_for: Duration::from_millis(200),
            resolve_secret_refs: true,
            ..FakeOptions::default()
        });
        let db = crate::support::TestDb::bootstrapped();
        let installation = dir.join("installation.json");
        let mut entry = json!({"id": "git-1", "url": url,
                               "caFile": dir.join("sender-ca.pem").display().to_string(),
                               "timeoutSeconds": timeout_seconds});
        if let Some(seconds) = maintenance_seconds {
            entry["maintenanceIntervalSeconds"] = json!(seconds);
        }
        std::fs::write(
            &installation,
            json!({
                "sandbox": {"id": "sandbox-1", "implementation": "kubernetes-sandbox",
                            "facets": ["read-only-root"]},
                "repositoryPolicy": {"id": "repos", "implementation": "occ-repository-policy"},
                "repositorySender": entry,
            })
            .to_string(),
        )
        .unwrap();
        let mut env = kube_env(&db, &fake, &dir, 2);
        env.push((
            "OCC_INSTALLATION_CONFIG",
            installation.display().to_string(),
        ));
        GitCluster {
            fake,
            db,
            env,
            dir,
            sender,
            ns: String::new(),
            k8s: String::new(),
            agent: String::new(),
        }
    }

    /// Once a worker runs: the ready Namespace, the harness key's Secret and the Agent.
    pub fn namespace_and_agent(&mut self) {
        let mut c = self.db.client();
        self.ns = ready_namespaces(&mut c, &self.fake, 1).remove(0);
        self.k8s = k8s_namespace(&self.ns);
        // The harness key `ready_namespaces` admitted (NAMESPACE/keys/api), which the kubelet
        // resolves too.
        put_secret(
            &self.fake,
            &self.k8s,
            "keys",
            "api",
            &crate::support::canary("harness-key"),
        );
        self.agent = create_agent(&mut c, &self.ns, "helper").0;
    }

    /// `admin agent deploy NS helper` on Kubernetes with `repositories`: the revision id.
    pub fn deploy(&self, repositories: &[&str]) -> String {
        self.deploy_agent("helper", repositories, &[])
    }

    /// `admin agent deploy NS AGENT` on Kubernetes with `repositories` and the flags `extra`
    /// (`--standing`, `--repository-deadline D`): the revision id.
    pub fn deploy_agent(&self, agent: &str, repositories: &[&str], extra: &[&str]) -> String {
        let mut more = vec![
            "--harness-secret",
            "key",
            "--compute-id",
            "kubernetes",
            "--actor",
            "admin",
        ];
        for r in repositories {
            more.extend(["--repository", r]);
        }
        more.extend_from_slice(extra);
        let args = crate::support::deploy_args(&self.ns, agent, "cfg", &more).split_off(1);
        admin(&self.env, &args)["revisionId"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

impl Drop for GitCluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn g22_a_fake_cluster_deployment_gets_the_operator_secret_and_a_stop_disposes_it() {
    let mut g = GitCluster::new("repository-e2e");
    let env = g.env.clone();
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    g.namespace_and_agent();
    let (ns, k8s) = (g.ns.clone(), g.k8s.clone());
    let mut c = g.db.client();

    // The operator creates the Secrets the sender's policy file names, in the Agent's own
    // Kubernetes namespace, and grants the Namespace both repositories (SPEC G8, G22).
    put_secret(&g.fake, &k8s, "git-acme-app", "token", git_token());
    put_secret(&g.fake, &k8s, "git-acme-docs", "token", git_token());
    for (reference, scope) in [(APP, "write"), (DOCS, "read")] {
        admin(
            &env,
            &[
                "repository",
                "grant",
                &ns,
                reference,
                "--scope",
                scope,
                "--actor",
                "admin",
            ],
        );
    }

    // Deployed with both: a session per REF, the material attached by reference, and the
    // Harness goes ready only because the kubelet found each Secret and key.
    let revision = g.deploy(&[&format!("{APP}=write"), DOCS]);
    assert_eq!(
        wait_ended(&mut c, &format!("agent_revision:{revision}:reconcile")),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    let open = sessions(&env, &ns, "helper");
    assert_eq!(
        open.iter()
            .map(|s| (s.0.as_str(), s.1.as_str()))
            .collect::<Vec<_>>(),
        [(APP, "open"), (DOCS, "open")],
        "{open:?}"
    );
    for s in &open {
        assert_eq!(
            s.2,
            format!("s-{}", s.3),
            "the reference sender's session id"
        );
    }
    let expected = vec![
        format!("OCC_GIT_REPOSITORY_1={APP}"),
        "OCC_GIT_CREDENTIAL_1=git-acme-app/token".to_string(),
        format!("OCC_GIT_REPOSITORY_2={DOCS}"),
        "OCC_GIT_CREDENTIAL_2=git-acme-docs/token".to_string(),
    ];
    let (template, pods) = harness_git_env(&g.fake, &k8s, &revision);
    assert_eq!(template, expected);
    assert!(
        !pods.is_empty() && pods.iter().all(|p| *p == expected),
        "{pods:?}"
    );
    let opened = sender_calls(g.sender.as_ref().unwrap(), "open");
    for s in &open {
        assert!(
            opened.contains(&(s.3.clone(), s.0.clone(), json!("opened"))),
            "{opened:?}"
        );
    }

    // Stopped: both sessions are closed (SPEC G12) and disposed, the sender asked `close`
    // for each admission, and the runtime is gone.
    admin(&env, &["agent", "stop", &ns, "helper", "--actor", "admin"]);
    wait_for("both sessions disposed", Duration::from_secs(120), || {
        sessions(&env, &ns, "helper")
            .iter()
            .all(|s| s.1 == "disposed")
    });
    let disposed = sessions(&env, &ns, "helper");
    assert_eq!(
        disposed
            .iter()
            .map(|s| (s.0.as_str(), s.3.as_str()))
            .collect::<Vec<_>>(),
        open.iter()
            .map(|s| (s.0.as_str(), s.3.as_str()))
            .collect::<Vec<_>>(),
        "the same sessions, no new one"
    );
    let closed = sender_calls(g.sender.as_ref().unwrap(), "close");
    for s in &open {
        assert!(
            closed
                .iter()
                .any(|(admission, _, outcome)| *admission == s.3 && *outcome == "closed"),
            "{closed:?}"
        );
    }
    wait_for("the Harness Pods gone", Duration::from_secs(60), || {
        harness_git_env(&g.fake, &k8s, &revision).1.is_empty()
    });

    // No Secret value in any line the worker or the sender wrote.
    let sender = g.sender.take().unwrap();
    for (what, output) in [
        (
            "worker",
            worker.signal_output("TERM", Duration::from_secs(30)),
        ),
        (
            "sender",
            sender.signal_output("TERM", Duration::from_secs(30)),
        ),
    ] {
        assert!(output.contains("\"event\""), "{what} wrote lines: {output}");
        assert!(
            !output.contains(git_token()),
            "{what} logged a Secret value"
        );
        let encoded = base64::engine::general_purpose::STANDARD.encode(git_token());
        assert!(!output.contains(&encoded), "{what} logged a Secret's data");
    }
}

// SPEC G11 on the fake cluster: the operator has not created the Secret the sender's policy
// names. The kubelet leaves the Harness waiting `CreateContainerConfigError`, the driver reports
// the session's material missing, the worker repairs it once (the session closed, a new
// admission opened) and prepares again; the same Secret is still missing, so the observation is
// invalid and the candidate is stopped for good with `INVALID_DRIVER_OBSERVATION`, every
// session closed before the stop (G12). Once the operator creates it, a new deployment
// activates.
#[test]
fn g11_a_missing_operator_secret_is_repaired_once_then_fails_and_a_redeploy_activates() {
    let mut g = GitCluster::new("repository-e2e-missing");
    let env = g.env.clone();
    let _worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    g.namespace_and_agent();
    let (ns, k8s) = (g.ns.clone(), g.k8s.clone());
    let mut c = g.db.client();
    admin(&env, &["repository", "grant", &ns, APP, "--actor", "admin"]);

    let first = g.deploy(&[APP]);
    assert_eq!(
        wait_ended(&mut c, &format!("agent_revision:{first}:reconcile")),
        (
            "failed_permanent".into(),
            Some("INVALID_DRIVER_OBSERVATION".into())
        )
    );
    let listed = sessions(&env, &ns, "helper");
    assert_eq!(
        listed.len(),
        2,
        "the first session and its repair: {listed:?}"
    );
    assert!(
        listed.iter().all(|s| s.0 == APP && s.1 == "disposed"),
        "{listed:?}"
    );
    let sender = g.sender.as_ref().unwrap();
    let (opened, closed) = (sender_calls(sender, "open"), sender_calls(sender, "close"));
    for s in &listed {
        assert!(
            opened.contains(&(s.3.clone(), APP.to_string(), json!("opened"))),
            "{opened:?}"
        );
        assert!(
            closed.iter().any(|(a, _, o)| *a == s.3 && *o == "closed"),
            "{closed:?}"
        );
    }
    assert_eq!((opened.len(), closed.len()), (2, 2), "one repair, no more");
    wait_for(
        "the refused candidate stopped",
        Duration::from_secs(60),
        || harness_git_env(&g.fake, &k8s, &first).1.is_empty(),
    );

    // The operator creates the Secret; the next deployment gets it.
    put_secret(&g.fake, &k8s, "git-acme-app", "token", git_token());
    let second = g.deploy(&[APP]);
    assert_eq!(
        wait_ended(&mut c, &format!("agent_revision:{second}:reconcile")),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    let (template, _) = harness_git_env(&g.fake, &k8s, &second);
    assert_eq!(
        template,
        [
            format!("OCC_GIT_REPOSITORY_1={APP}"),
            "OCC_GIT_CREDENTIAL_1=git-acme-app/token".to_string()
        ]
    );
    let open: Vec<_> = sessions(&env, &ns, "helper")
        .into_iter()
        .filter(|s| s.1 == "open")
        .collect();
    assert_eq!(open.len(), 1, "{open:?}");
}

/// The bash the guide's step runs in: the kind recipe's variables (`occ`, `bin`, `ns`), its
/// worker started as the recipe starts it (a job the step restarts), and the tests' `kubectl`
/// (tests/it/kubectl.rs) against the fake. Every job is killed at the end.
fn guide_script(block: &str, ns: &str, fake: &KubeFake, dir: &Path) -> String {
    let occ = env!("CARGO_BIN_EXE_occ-worker");
    let bin = Path::new(env!("CARGO_BIN_EXE_occ-git-sender"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    format!(
        r#"set -euo pipefail
occ={occ}
bin={bin}
ns={ns}
{kubectl}
$occ run > target/kind-worker.log 2>&1 &
trap 'kill $(jobs -p) 2> /dev/null || true' EXIT
{block}"#,
        kubectl = crate::kubectl::stand_in(fake, dir),
    )
}

// docs/kubernetes.md's Git step after the kind recipe: with the recipe's state (the ready
// Namespace team-a, its Configuration cfg and Secret key with the harness Secret, the Agent
// helper) and its worker running, the block runs as written against the fake, whose kubelet
// resolves every secretKeyRef: the deployment activates with the operator's Secret attached,
// the stop disposes of the session, and the sender's log shows the open and the close.
#[test]
fn g22_the_kubernetes_guide_step_runs_against_the_fake() {
    use crate::workspace_setup::guide_block;
    // The guide's example Secret value, planted as a canary (tests/canary.rs).
    let planted = crate::support::canary("git-token");
    let block = guide_block("occ-git-sender").replace("not-a-real-token", &planted);
    let _ports = crate::support::take_turn(crate::support::Turn::DocumentedPorts);
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(50),
        resolve_secret_refs: true,
        ..FakeOptions::default()
    });
    let dir = scratch("git-guide");
    std::fs::create_dir_all(dir.join("target")).unwrap();
    let db = crate::support::TestDb::bootstrapped();
    let env = kube_env(&db, &fake, &dir, 2);
    let mut c = db.client();
    let (ns, k8s) = {
        // The recipe's worker until team-a is ready; the script starts its own.
        let _worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
        let v: Value = crate::support::one(
            &mut c,
            "SELECT occ.namespace_create('admin', 'team-a')",
            &[],
        );
        let ns = v["id"].as_str().unwrap().to_string();
        let k8s = k8s_namespace(&ns);
        wait_for("the tenant namespace", Duration::from_secs(60), || {
            fake.get(&format!("/api/v1/namespaces/{k8s}")).is_some()
        });
        fake.put_tenant_rolebinding(&k8s);
        wait_for("team-a ready", Duration::from_secs(60), || {
            let ready: i64 = crate::support::scalar(
                &mut db.client(),
                "SELECT count(*) FROM occ.namespaces WHERE name = 'team-a' AND status = 'ready'",
            );
            ready == 1
        });
        (ns, k8s)
    };
    c.execute(
        "SELECT occ.configuration_put($1, 'cfg', '{\"model\": \"gpt\"}', 'admin')",
        &[&ns],
    )
    .unwrap();
    c.execute(
        "SELECT occ.secret_create($1, 'key', $2, 'admin')",
        &[&ns, &format!("{k8s}/harness/api-key")],
    )
    .unwrap();
    put_secret(
        &fake,
        &k8s,
        "harness",
        "api-key",
        &crate::support::canary("harness-key"),
    );
    let (agent, _) = create_agent(&mut c, &ns, "helper");

    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg(guide_script(&block, &k8s, &fake, &dir))
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let out = crate::support::logged("guide", cmd.output().expect("bash"));
    crate::support::log_copy("kind-worker", &dir.join("target/kind-worker.log"));
    crate::support::log_copy("kind-git.calls", &dir.join("target/kind-git/calls.log"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let log = std::fs::read_to_string(dir.join("target/kind-worker.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "{stdout}{}\nworker: {log}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The operator's Secret, created by the step, is the one the Harness got.
    let secret = fake
        .get(&format!("/api/v1/namespaces/{k8s}/secrets/git-acme-app"))
        .expect("the step's Secret");
    assert_eq!(
        secret["data"]["token"],
        base64::engine::general_purpose::STANDARD.encode(&planted)
    );
    let revision: String = crate::support::one(
        &mut c,
        "SELECT id FROM occ.agent_revisions WHERE agent_id = $1 AND repository_credentials IS NOT NULL",
        &[&agent],
    );
    let (template, _) = harness_git_env(&fake, &k8s, &revision);
    assert_eq!(
        template,
        [
            format!("OCC_GIT_REPOSITORY_1={APP}"),
            "OCC_GIT_CREDENTIAL_1=git-acme-app/token".to_string()
        ]
    );
    // Open after the deployment, disposed after the stop, as the step's comments say.
    let phases: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(APP))
        .filter_map(|l| {
            ["open", "disposed"]
                .into_iter()
                .find(|p| l.split_whitespace().any(|w| w == *p))
        })
        .collect();
    assert_eq!(phases, ["open", "disposed"], "{stdout}");
    let calls: Vec<(String, String)> =
        std::fs::read_to_string(dir.join("target/kind-git/calls.log"))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["event"] == "sender.call")
            .map(|e| {
                (
                    e["call"].as_str().unwrap_or("").to_string(),
                    e["outcome"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
    assert_eq!(
        calls,
        [
            ("open".into(), "opened".into()),
            ("close".into(), "closed".into())
        ]
    );
    assert!(!log.contains(&planted) && !stdout.contains(&planted));
    let _ = std::fs::remove_dir_all(dir);
}

// SPEC G19 on two worker processes: each session row is committed before the sender call it
// announces, with its `admission_id` as the call's idempotency key. The first worker is
// killed (SIGKILL) while the sender holds its `open` unanswered; the second worker recovers the
// stale claim, finds the row still `opening` and opens it again with the same admission, so the
// sender sees that admission twice and the revision has one session per REF. Deleting the
// Agent closes both (G13) and its rows go with it.
#[test]
fn g19_a_crash_before_the_answer_reopens_the_same_admission() {
    use crate::repository_sender::{Answer, SenderServer};
    let server = SenderServer::start();
    let dir = scratch("repository-e2e-crash");
    std::fs::write(dir.join("sender-ca.pem"), &server.ca_pem).unwrap();
    // The first `open` is answered only long after its worker is gone.
    server.answer("open", Answer::Session(Duration::from_secs(60)));
    server.answer("close", Answer::Json(json!({"closed": true})));
    let mut g = GitCluster::with_sender(dir, None, &server.url(), 30, None);
    let env = g.env.clone();
    let first = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    g.namespace_and_agent();
    let (ns, k8s, agent) = (g.ns.clone(), g.k8s.clone(), g.agent.clone());
    let mut c = g.db.client();
    put_secret(&g.fake, &k8s, "git-app", "token", git_token());
    put_secret(&g.fake, &k8s, "git-docs", "token", git_token());
    for reference in [APP, DOCS] {
        admin(
            &env,
            &["repository", "grant", &ns, reference, "--actor", "admin"],
        );
    }
    let revision = g.deploy(&[APP, DOCS]);
    let opens = |server: &SenderServer| -> Vec<(String, String)> {
        server
            .calls()
            .into_iter()
            .filter(|c| c.path == "/sender/open")
            .map(|c| {
                let text = |k: &str| c.body[k].as_str().unwrap_or("").to_string();
                (text("repositoryRef"), text("admissionId"))
            })
            .collect()
    };
    let admission = wait_value("the first open", Duration::from_secs(60), || {
        opens(&server).first().map(|(_, a)| a.clone())
    });
    // Committed before the call it announces: the row is there, `opening`, when the call is.
    assert_eq!(
        sessions(&env, &ns, "helper"),
        [(
            APP.into(),
            "opening".into(),
            String::new(),
            admission.clone()
        )]
    );
    let first_output = first.signal_output("KILL", Duration::from_secs(30));

    server.answer("open", Answer::Session(Duration::ZERO));
    let second = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    assert_eq!(
        wait_ended(&mut c, &format!("agent_revision:{revision}:reconcile")),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    let open = sessions(&env, &ns, "helper");
    assert_eq!(open.len(), 2, "one session per REF: {open:?}");
    assert_eq!(
        (&open[0].0, &open[0].1, &open[0].3),
        (&APP.to_string(), &"open".to_string(), &admission),
        "{open:?}"
    );
    assert_eq!((open[1].0.as_str(), open[1].1.as_str()), (DOCS, "open"));
    assert_eq!(
        opens(&server),
        [
            (APP.to_string(), admission.clone()),
            (APP.to_string(), admission.clone()),
            (DOCS.to_string(), open[1].3.clone()),
        ],
        "the same admission asked again, then the next REF"
    );
    let (template, pods) = harness_git_env(&g.fake, &k8s, &revision);
    let expected = [
        format!("OCC_GIT_REPOSITORY_1={APP}"),
        "OCC_GIT_CREDENTIAL_1=git-app/token".to_string(),
        format!("OCC_GIT_REPOSITORY_2={DOCS}"),
        "OCC_GIT_CREDENTIAL_2=git-docs/token".to_string(),
    ];
    assert_eq!(template, expected);
    assert!(
        !pods.is_empty() && pods.iter().all(|p| *p == expected),
        "{pods:?}"
    );

    // Deleted: both sessions closed by their admission, then the rows go with the Agent.
    admin(
        &env,
        &["agent", "delete", &ns, "helper", "--actor", "admin"],
    );
    wait_for("the Agent deleted", Duration::from_secs(120), || {
        let agents: i64 = crate::support::one(
            &mut c,
            "SELECT count(*) FROM occ.agents WHERE id = $1",
            &[&agent],
        );
        agents == 0
    });
    let closed: Vec<String> = server
        .calls()
        .into_iter()
        .filter(|c| c.path == "/sender/close")
        .map(|c| c.body["admissionId"].as_str().unwrap_or("").to_string())
        .collect();
    for s in &open {
        assert!(closed.contains(&s.3), "{closed:?}");
    }
    let left: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.repository_sessions WHERE agent_id = $1",
        &[&agent],
    );
    assert_eq!(left, 0);

    for (what, output) in [
        ("the killed worker", first_output),
        (
            "the second worker",
            second.signal_output("TERM", Duration::from_secs(30)),
        ),
    ] {
        assert!(output.contains("\"event\""), "{what} wrote lines: {output}");
        assert!(
            !output.contains(git_token()),
            "{what} logged a Secret value"
        );
    }
}

// SPEC G12, G13 and G3 on the fake cluster: the sender answers no `close` (503). Deleting the
// Agent closes its session without awaiting it: the row stays `closing`, a `terminal-runtime`
// repository cleanup is registered, the runtime is retired all the same, and the deletion waits
// `REPOSITORY_CLEANUP_PENDING` with the Agent and its rows intact. Once the sender answers
// again, the cleanup asks `status`, disposes of the session, and the deletion completes.
#[test]
fn g13_on_the_fake_cluster_deletion_waits_until_the_sender_confirms_the_close() {
    use crate::repository_sender::{Answer, SenderServer};
    let server = SenderServer::start();
    let dir = scratch("repository-e2e-unconfirmed");
    std::fs::write(dir.join("sender-ca.pem"), &server.ca_pem).unwrap();
    server.answer("open", Answer::Session(Duration::ZERO));
    let unavailable = Answer::Status(503, json!({}));
    server.answer("close", unavailable.clone());
    server.answer("status", unavailable);
    let mut g = GitCluster::with_sender(dir, None, &server.url(), 5, Some(1));
    let env = g.env.clone();
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    g.namespace_and_agent();
    let (ns, k8s, agent) = (g.ns.clone(), g.k8s.clone(), g.agent.clone());
    let mut c = g.db.client();
    put_secret(&g.fake, &k8s, "git-app", "token", git_token());
    admin(&env, &["repository", "grant", &ns, APP, "--actor", "admin"]);
    let revision = g.deploy(&[APP]);
    assert_eq!(
        wait_ended(&mut c, &format!("agent_revision:{revision}:reconcile")),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    let admission = sessions(&env, &ns, "helper")[0].3.clone();

    let deleted = admin(
        &env,
        &["agent", "delete", &ns, "helper", "--actor", "admin"],
    );
    let key = deleted["work"].as_str().unwrap().to_string();
    // A deferral is said in the work's evidence (its reason code stays unset while queued).
    let deferred = |key: &str| -> (String, Option<String>) {
        let shown = admin(&env, &["work", "show", key]);
        let code = shown["evidence"]
            .as_array()
            .and_then(|e| e.last())
            .and_then(|e| e["code"].as_str())
            .map(str::to_string);
        (shown["state"].as_str().unwrap_or("").to_string(), code)
    };
    let waiting = (
        "queued".to_string(),
        Some("REPOSITORY_CLEANUP_PENDING".to_string()),
    );
    wait_for("the deletion waiting", Duration::from_secs(60), || {
        deferred(&key) == waiting
    });
    assert_eq!(
        sessions(&env, &ns, "helper"),
        [(
            APP.into(),
            "closing".into(),
            format!("s-{admission}"),
            admission.clone()
        )]
    );
    let cleanup = format!("agent_revision:{revision}:repository_cleanup:terminal-runtime");
    wait_for(
        "the cleanup waiting on the sender",
        Duration::from_secs(60),
        || deferred(&cleanup) == waiting,
    );
    wait_for(
        "the runtime retired all the same",
        Duration::from_secs(60),
        || harness_git_env(&g.fake, &k8s, &revision).1.is_empty(),
    );
    crate::support::holds_for("the Agent kept", Duration::from_secs(3), || {
        let agents: i64 = crate::support::one(
            &mut c,
            "SELECT count(*) FROM occ.agents WHERE id = $1",
            &[&agent],
        );
        agents == 1
    });

    // The sender answers again: the cleanup disposes of the session, the deletion completes.
    server.answer("close", Answer::Json(json!({"closed": true})));
    server.answer("status", Answer::Json(json!({"state": "closed"})));
    wait_for("the Agent deleted", Duration::from_secs(120), || {
        let agents: i64 = crate::support::one(
            &mut c,
            "SELECT count(*) FROM occ.agents WHERE id = $1",
            &[&agent],
        );
        agents == 0
    });
    let asked: Vec<(String, String)> = server
        .calls()
        .into_iter()
        .filter(|c| c.path != "/sender/open")
        .map(|c| {
            (
                c.path.trim_start_matches("/sender/").to_string(),
                c.body["admissionId"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        asked.iter().all(|(_, a)| *a == admission),
        "only the one admission: {asked:?}"
    );
    assert_eq!(asked.first().map(|(call, _)| call.as_str()), Some("close"));
    assert!(asked.iter().any(|(call, _)| call == "status"), "{asked:?}");
    let output = worker.signal_output("TERM", Duration::from_secs(30));
    assert!(!output.contains(git_token()));
}

#[test]
fn g14_expiry_on_the_fake_cluster_rolls_git_out_and_keeps_the_harness() {
    let mut g = GitCluster::with_interval("repository-expiry", Some(1));
    let env = g.env.clone();
    let _worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    g.namespace_and_agent();
    let (ns, k8s) = (g.ns.clone(), g.k8s.clone());
    let mut c = g.db.client();
    put_secret(&g.fake, &k8s, "git-acme-app", "token", git_token());
    admin(
        &env,
        &[
            "repository",
            "grant",
            &ns,
            APP,
            "--scope",
            "write",
            "--actor",
            "admin",
        ],
    );
    let revision = g.deploy(&[&format!("{APP}=write")]);
    assert_eq!(
        wait_ended(&mut c, &format!("agent_revision:{revision}:reconcile")),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    assert!(!harness_git_env(&g.fake, &k8s, &revision).0.is_empty());
    // The deadline passes (the revision guard refuses changes, so triggers are bypassed).
    c.batch_execute("SET session_replication_role = replica")
        .unwrap();
    c.execute(
        "UPDATE occ.agent_revisions SET repository_credentials = jsonb_set(repository_credentials,
             '{deadlineAt}', '\"2020-01-01T00:00:00.000Z\"') WHERE id = $1",
        &[&revision],
    )
    .unwrap();
    c.batch_execute("SET session_replication_role = origin")
        .unwrap();
    let maintenance = format!("agent_revision:{revision}:maintenance:%");
    wait_for("Git withdrawn", Duration::from_secs(120), || {
        let withdrawn: i64 =
            g.db.client()
                .query_one(
                    "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE $1
                     AND reason_code = 'REPOSITORY_ACCESS_WITHDRAWN'",
                    &[&maintenance],
                )
                .unwrap()
                .get(0);
        withdrawn > 0
    });
    // The Deployment and every Pod of the revision run without Git; the Harness still serves.
    let (template, pods) = harness_git_env(&g.fake, &k8s, &revision);
    assert!(template.is_empty(), "{template:?}");
    assert!(
        !pods.is_empty() && pods.iter().all(|p| p.is_empty()),
        "{pods:?}"
    );
    assert!(sessions(&env, &ns, "helper")
        .iter()
        .all(|s| s.1 == "disposed"));
    let active: Option<String> = c
        .query_one(
            "SELECT active_revision_id FROM occ.agents WHERE id = $1",
            &[&g.agent],
        )
        .unwrap()
        .get(0);
    assert_eq!(active.as_deref(), Some(revision.as_str()));
}

/// The sessions of `agent` as the database holds them: (REF, phase, admission id), sorted by
/// REF then admission id (a cheap probe for waits; `sessions` is the operator's view).
fn session_rows(c: &mut postgres::Client, agent: &str) -> Vec<(String, String, String)> {
    c.query(
        "SELECT repository_ref::text, phase, admission_id::text FROM occ.repository_sessions
         WHERE agent_id = $1 ORDER BY repository_ref, admission_id",
        &[&agent],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// The sorted uids of the running Pods of revision `rev` in namespace `ns`, as the driver
/// captures an execution (SPEC G15, G19).
fn running_uids(fake: &KubeFake, ns: &str, rev: &str) -> Vec<String> {
    let mut uids: Vec<String> = fake
        .objects("pods")
        .into_iter()
        .filter(|p| {
            p["metadata"]["namespace"] == ns
                && p["metadata"]["labels"]["occ.revision"] == rev
                && p["metadata"].get("deletionTimestamp").is_none()
                && p["status"]["phase"] == "Running"
        })
        .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
        .collect();
    uids.sort_unstable();
    uids
}

/// How many maintenance works of `revision` completed with `code`.
fn maintenance_with(c: &mut postgres::Client, revision: &str, code: &str) -> i64 {
    crate::support::one(
        c,
        "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE $1 AND reason_code = $2",
        &[&format!("agent_revision:{revision}:maintenance:%"), &code],
    )
}

/// Whether Agent `agent` still exists.
fn agent_exists(c: &mut postgres::Client, agent: &str) -> bool {
    crate::support::one::<i64>(
        c,
        "SELECT count(*) FROM occ.agents WHERE id = $1",
        &[&agent],
    ) == 1
}

/// The active revision of Agent `agent`.
fn active_revision(c: &mut postgres::Client, agent: &str) -> Option<String> {
    crate::support::one(
        c,
        "SELECT active_revision_id FROM occ.agents WHERE id = $1",
        &[&agent],
    )
}

// The issue's walk-through on two `occ-worker run` processes sharing one database, the TLS
// fake API server and `occ-git-sender`, with 1 s maintenance buckets:
// - the Namespace is granted APP and DOCS (G8) and Agent `helper` deployed with both until a
//   deadline (G22). The sender is held (SIGSTOP: it accepts and never answers) so the worker
//   holding the reconcile has written the APP row `opening` (G19: committed before the call
//   it announces) and waits on its `open`; that worker is SIGKILLed; the survivor recovers the
//   stale claim and opens the same admission again, then DOCS, and activates;
// - the deadline passes (G14): the next maintenance bucket rolls the Harness out without
//   OCC_GIT_*, disposes of both sessions and keeps the revision active and serving;
// - Agent `reviewer` is approved for DOCS and deployed `--standing` (G8, G15); the approval is
//   removed (`admin repository unapprove`): maintenance hands off
//   `REPOSITORY_STANDING_APPROVAL_REMOVED` to the `standing-withdrawal` cleanup (G2, G3), and
//   the next bucket withdraws Git `REPOSITORY_ACCESS_WITHDRAWN` with the runtime kept;
// - both Agents are deleted (G13): every session was closed at the sender and disposed, the
//   rows and the Agents are gone with their Harness Pods;
// - the canary value of the operator's Secrets is in no line either worker or the sender wrote.
#[test]
fn g_the_issue_walkthrough_two_workers_kill_expiry_standing_and_deletion() {
    let dir = scratch("repository-walkthrough");
    let policy = dir.join("git-policy.json");
    std::fs::write(
        &policy,
        json!({"repositories": {
            APP: {"secret": "git-acme-app", "key": "token"},
            DOCS: {"secret": "git-acme-docs", "key": "token"},
        }})
        .to_string(),
    )
    .unwrap();
    let (sender, addr) = start_git_sender(&dir, &policy);
    // A 30 s call timeout: the held `open` outlasts the kill by far.
    let mut g = GitCluster::with_sender(dir, Some(sender), &format!("https://{addr}"), 30, Some(1));
    let env = g.env.clone();
    let mut workers = vec![
        WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap()),
        WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap()),
    ];
    g.namespace_and_agent();
    let (ns, k8s, helper) = (g.ns.clone(), g.k8s.clone(), g.agent.clone());
    let mut c = g.db.client();
    put_secret(&g.fake, &k8s, "git-acme-app", "token", git_token());
    put_secret(&g.fake, &k8s, "git-acme-docs", "token", git_token());
    for (reference, scope) in [(APP, "write"), (DOCS, "read")] {
        admin(
            &env,
            &[
                "repository",
                "grant",
                &ns,
                reference,
                "--scope",
                scope,
                "--actor",
                "admin",
            ],
        );
    }

    // Agent `helper` with both REFs until a deadline; the sender holds every call.
    g.sender.as_ref().unwrap().signal("STOP");
    let first = g.deploy_agent(
        "helper",
        &[&format!("{APP}=write"), DOCS],
        &["--repository-deadline", "8h"],
    );
    let reconcile = format!("agent_revision:{first}:reconcile");
    let admission =
        wait_value(
            "the APP row opening",
            Duration::from_secs(120),
            || match session_rows(&mut c, &helper).as_slice() {
                [(r, phase, admission)] if r == APP && phase == "opening" => {
                    Some(admission.clone())
                }
                _ => None,
            },
        );
    let holder: Option<i32> = crate::support::one(
        &mut c,
        "SELECT claim_pid FROM occ.work_status WHERE idempotency_key = $1",
        &[&reconcile],
    );
    let victim = workers
        .iter()
        .position(|w| Some(w.pid()) == holder)
        .unwrap_or_else(|| panic!("the reconcile held by neither worker: {holder:?}"));
    let killed = workers
        .remove(victim)
        .signal_output("KILL", Duration::from_secs(30));
    let survivor = workers.remove(0);
    // Still `opening` with no answer: nothing was recorded for the killed call.
    assert_eq!(
        session_rows(&mut c, &helper),
        [(APP.into(), "opening".into(), admission.clone())]
    );
    g.sender.as_ref().unwrap().signal("CONT");

    assert_eq!(
        wait_ended(&mut c, &reconcile),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    let handled_by: Option<i32> = crate::support::one(
        &mut c,
        "SELECT claim_pid FROM occ.work_status WHERE idempotency_key = $1",
        &[&reconcile],
    );
    assert_eq!(handled_by, None, "the claim is released once done");
    // The killed claim is recorded as such, and the survivor's pass completed it.
    let attempts: Vec<String> = c
        .query(
            "SELECT a.outcome FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
             WHERE w.idempotency_key = $1 ORDER BY a.id",
            &[&reconcile],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        (
            attempts.first().map(String::as_str),
            attempts.last().map(String::as_str)
        ),
        (Some("lease_expired"), Some("succeeded")),
        "{attempts:?}"
    );
    let opened = sessions(&env, &ns, "helper");
    assert_eq!(
        opened
            .iter()
            .map(|s| (s.0.as_str(), s.1.as_str()))
            .collect::<Vec<_>>(),
        [(APP, "open"), (DOCS, "open")],
        "one session per REF: {opened:?}"
    );
    assert_eq!(opened[0].3, admission, "the same admission opened again");
    assert_eq!(opened[0].2, format!("s-{admission}"));
    let sender_opens = sender_calls(g.sender.as_ref().unwrap(), "open");
    for s in &opened {
        assert!(
            sender_opens.contains(&(s.3.clone(), s.0.clone(), json!("opened"))),
            "{sender_opens:?}"
        );
    }
    let both = vec![
        format!("OCC_GIT_REPOSITORY_1={APP}"),
        "OCC_GIT_CREDENTIAL_1=git-acme-app/token".to_string(),
        format!("OCC_GIT_REPOSITORY_2={DOCS}"),
        "OCC_GIT_CREDENTIAL_2=git-acme-docs/token".to_string(),
    ];
    let (template, pods) = harness_git_env(&g.fake, &k8s, &first);
    assert_eq!(template, both);
    assert!(
        !pods.is_empty() && pods.iter().all(|p| *p == both),
        "{pods:?}"
    );

    // The deadline passes (the revision guard refuses changes, so triggers are bypassed): the
    // next bucket withdraws Git and keeps the Harness (G14).
    c.batch_execute("SET session_replication_role = replica")
        .unwrap();
    c.execute(
        "UPDATE occ.agent_revisions SET repository_credentials = jsonb_set(repository_credentials,
             '{deadlineAt}', '\"2020-01-01T00:00:00.000Z\"') WHERE id = $1",
        &[&first],
    )
    .unwrap();
    c.batch_execute("SET session_replication_role = origin")
        .unwrap();
    wait_for("helper's Git withdrawn", Duration::from_secs(180), || {
        maintenance_with(&mut c, &first, "REPOSITORY_ACCESS_WITHDRAWN") > 0
    });
    let (template, pods) = harness_git_env(&g.fake, &k8s, &first);
    assert!(template.is_empty(), "{template:?}");
    assert!(
        !pods.is_empty() && pods.iter().all(|p| p.is_empty()),
        "{pods:?}"
    );
    let expired = session_rows(&mut c, &helper);
    assert_eq!(expired.len(), 2, "{expired:?}");
    assert!(expired.iter().all(|s| s.1 == "disposed"), "{expired:?}");
    assert_eq!(active_revision(&mut c, &helper), Some(first.clone()));

    // Agent `reviewer`, approved for DOCS and deployed `--standing`; then unapproved (G15).
    let reviewer = create_agent(&mut c, &ns, "reviewer").0;
    admin(
        &env,
        &[
            "repository",
            "approve",
            &ns,
            "reviewer",
            DOCS,
            "--actor",
            "admin",
        ],
    );
    let standing = g.deploy_agent("reviewer", &[DOCS], &["--standing"]);
    assert_eq!(
        wait_ended(&mut c, &format!("agent_revision:{standing}:reconcile")),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    let docs_only = vec![
        format!("OCC_GIT_REPOSITORY_1={DOCS}"),
        "OCC_GIT_CREDENTIAL_1=git-acme-docs/token".to_string(),
    ];
    let (template, pods) = harness_git_env(&g.fake, &k8s, &standing);
    assert_eq!(template, docs_only);
    assert!(
        !pods.is_empty() && pods.iter().all(|p| *p == docs_only),
        "{pods:?}"
    );
    let reviewing = session_rows(&mut c, &reviewer);
    assert_eq!(
        reviewing
            .iter()
            .map(|s| (s.0.as_str(), s.1.as_str()))
            .collect::<Vec<_>>(),
        [(DOCS, "open")]
    );
    // The execution that got the material was captured: the sorted uids of the running Pods
    // of the revision (its Harness and whatever else runs it).
    let captured: Value = crate::support::one(
        &mut c,
        "SELECT execution FROM occ.repository_executions WHERE revision_id = $1",
        &[&standing],
    );
    assert_eq!(captured, json!(running_uids(&g.fake, &k8s, &standing)));

    admin(
        &env,
        &[
            "repository",
            "unapprove",
            &ns,
            "reviewer",
            DOCS,
            "--actor",
            "admin",
        ],
    );
    wait_for("reviewer's Git withdrawn", Duration::from_secs(180), || {
        maintenance_with(&mut c, &standing, "REPOSITORY_ACCESS_WITHDRAWN") > 0
    });
    assert_eq!(
        maintenance_with(&mut c, &standing, "REPOSITORY_STANDING_APPROVAL_REMOVED"),
        1,
        "handed off once"
    );
    // The hand-off's cleanup completes on its own (it may run after the bucket withdrew Git).
    assert_eq!(
        wait_ended(
            &mut c,
            &format!("agent_revision:{standing}:repository_cleanup:standing-withdrawal")
        ),
        (
            "succeeded".into(),
            Some("REPOSITORY_CLEANUP_COMPLETE".into())
        )
    );
    let (template, pods) = harness_git_env(&g.fake, &k8s, &standing);
    assert!(template.is_empty(), "{template:?}");
    assert!(
        !pods.is_empty() && pods.iter().all(|p| p.is_empty()),
        "{pods:?}"
    );
    assert_eq!(
        session_rows(&mut c, &reviewer),
        [(DOCS.into(), "disposed".into(), reviewing[0].2.clone())]
    );
    assert_eq!(active_revision(&mut c, &reviewer), Some(standing.clone()));
    // Helper's revision kept serving all along.
    assert_eq!(active_revision(&mut c, &helper), Some(first.clone()));

    // Every session was disposed by its admission at the sender: helper's by `close` (G12's
    // closeRevision during the expiry); reviewer's was moved to `closing` by the hand-off, so
    // the cleanup asks `status` (G19 *cleanup*), which the reference sender, holding nothing,
    // answers `closed`.
    let helper_sessions = session_rows(&mut c, &helper);
    assert_eq!(helper_sessions.len(), 2, "{helper_sessions:?}");
    let reviewer_sessions = session_rows(&mut c, &reviewer);
    let sender = g.sender.as_ref().unwrap();
    let closes = sender_calls(sender, "close");
    for s in &helper_sessions {
        assert!(
            closes.iter().any(|(a, _, o)| *a == s.2 && *o == "closed"),
            "{s:?} not closed: {closes:?}"
        );
    }
    let statuses = sender_calls(sender, "status");
    assert!(
        statuses
            .iter()
            .chain(&closes)
            .any(|(a, _, o)| *a == reviewer_sessions[0].2 && *o == "closed"),
        "{reviewer_sessions:?} not confirmed closed: {statuses:?} {closes:?}"
    );

    // Both Agents deleted: they go, with their session rows and their Harness Pods (G13).
    for agent in ["helper", "reviewer"] {
        admin(&env, &["agent", "delete", &ns, agent, "--actor", "admin"]);
    }
    wait_for("both Agents deleted", Duration::from_secs(180), || {
        !agent_exists(&mut c, &helper) && !agent_exists(&mut c, &reviewer)
    });
    let left: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.repository_sessions WHERE agent_id = ANY($1)",
        &[&vec![helper.clone(), reviewer.clone()]],
    );
    assert_eq!(left, 0);
    wait_for("the Harness Pods gone", Duration::from_secs(120), || {
        harness_git_env(&g.fake, &k8s, &first).1.is_empty()
            && harness_git_env(&g.fake, &k8s, &standing).1.is_empty()
    });
    assert_eq!(
        sender_calls(g.sender.as_ref().unwrap(), "open").len(),
        3,
        "no session opened after a withdrawal"
    );

    // No Secret value in any line either worker or the sender wrote.
    let sender = g.sender.take().unwrap();
    let encoded = base64::engine::general_purpose::STANDARD.encode(git_token());
    for (what, output) in [
        ("the killed worker", killed),
        (
            "the surviving worker",
            survivor.signal_output("TERM", Duration::from_secs(30)),
        ),
        (
            "the sender",
            sender.signal_output("TERM", Duration::from_secs(30)),
        ),
    ] {
        assert!(output.contains("\"event\""), "{what} wrote lines: {output}");
        assert!(
            !output.contains(git_token()),
            "{what} logged a Secret value"
        );
        assert!(!output.contains(&encoded), "{what} logged a Secret's data");
    }
}

// SPEC G15 and G19 *authorize* on the fake cluster: a standing revision's execution is the
// sorted uids of its running Pods, captured when it went ready. Its Harness Pod is deleted and
// the ReplicaSet makes another (a new uid): the next maintenance bucket finds an execution that
// is not the captured one, observes the Harness and waits `REPOSITORY_EXECUTION_UNVERIFIED`
// (deferred, never failed, `harnessState` on its `worker.completed`), neither preparing nor
// opening a session again nor recapturing; the revision stays active and keeps serving with
// its Git material.
#[test]
fn g15_on_the_fake_cluster_a_restarted_harness_is_unverified() {
    let mut g = GitCluster::with_interval("repository-unverified", Some(1));
    let env = g.env.clone();
    let worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    g.namespace_and_agent();
    let (ns, k8s, agent) = (g.ns.clone(), g.k8s.clone(), g.agent.clone());
    let mut c = g.db.client();
    put_secret(&g.fake, &k8s, "git-acme-app", "token", git_token());
    admin(&env, &["repository", "grant", &ns, APP, "--actor", "admin"]);
    admin(
        &env,
        &[
            "repository",
            "approve",
            &ns,
            "helper",
            APP,
            "--actor",
            "admin",
        ],
    );
    let revision = g.deploy_agent("helper", &[APP], &["--standing"]);
    assert_eq!(
        wait_ended(&mut c, &format!("agent_revision:{revision}:reconcile")),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    let captured: Value = crate::support::one(
        &mut c,
        "SELECT execution FROM occ.repository_executions WHERE revision_id = $1",
        &[&revision],
    );
    assert_eq!(captured, json!(running_uids(&g.fake, &k8s, &revision)));
    let harness = |fake: &KubeFake| -> Vec<Value> {
        fake.objects("pods")
            .into_iter()
            .filter(|p| harness_of(p, &k8s, &revision))
            .collect()
    };
    let pods = harness(&g.fake);
    assert_eq!(pods.len(), 1, "{pods:?}");
    let (old_name, old_uid) = (
        pods[0]["metadata"]["name"].as_str().unwrap().to_string(),
        pods[0]["metadata"]["uid"].clone(),
    );
    // Verified while nothing changed: the buckets go on.
    wait_for("a verified bucket", Duration::from_secs(60), || {
        maintenance_with(&mut c, &revision, "REVISION_ALREADY_ACTIVE") > 0
    });

    g.fake
        .delete_object(&format!("/api/v1/namespaces/{k8s}/pods/{old_name}"));
    wait_for(
        "another Harness Pod running",
        Duration::from_secs(60),
        || {
            let pods = harness(&g.fake);
            pods.len() == 1
                && pods[0]["metadata"]["uid"] != old_uid
                && pods[0]["status"]["phase"] == "Running"
        },
    );
    let unverified = |c: &mut postgres::Client| -> i64 {
        crate::support::one(
            c,
            "SELECT count(*) FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
             WHERE w.idempotency_key LIKE $1 AND a.code = 'REPOSITORY_EXECUTION_UNVERIFIED'
               AND a.outcome = 'deferred'",
            &[&format!("agent_revision:{revision}:maintenance:%")],
        )
    };
    wait_for("the execution unverified", Duration::from_secs(120), || {
        unverified(&mut c) >= 2
    });
    // Each deferral says what it observed; once the new Pod runs, `running`.
    let deferrals = |worker: &WorkerProcess| -> Vec<Value> {
        worker
            .events()
            .into_iter()
            .filter(|e| {
                e["event"] == "worker.completed" && e["code"] == "REPOSITORY_EXECUTION_UNVERIFIED"
            })
            .collect()
    };
    wait_for(
        "a deferral observing it running",
        Duration::from_secs(60),
        || {
            deferrals(&worker)
                .iter()
                .any(|e| e["harnessState"] == "running")
        },
    );
    for e in deferrals(&worker) {
        assert_eq!(e["outcome"], "pending", "{e}");
        assert!(
            ["running", "starting", "lost", "unknown"]
                .iter()
                .any(|s| e["harnessState"] == *s),
            "{e}"
        );
    }

    // Still serving with its Git material, the same session, nothing recaptured or failed.
    let failed: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE $1 AND state LIKE 'failed%'",
        &[&format!("agent_revision:{revision}:maintenance:%")],
    );
    assert_eq!(failed, 0);
    assert_eq!(active_revision(&mut c, &agent), Some(revision.clone()));
    let again: Value = crate::support::one(
        &mut c,
        "SELECT execution FROM occ.repository_executions WHERE revision_id = $1",
        &[&revision],
    );
    assert_eq!(again, captured, "the pass waits, it never recaptures");
    let (template, pods) = harness_git_env(&g.fake, &k8s, &revision);
    let git = [
        format!("OCC_GIT_REPOSITORY_1={APP}"),
        "OCC_GIT_CREDENTIAL_1=git-acme-app/token".to_string(),
    ];
    assert_eq!(template, git);
    assert!(pods.len() == 1 && pods[0] == git, "{pods:?}");
    let listed = sessions(&env, &ns, "helper");
    assert_eq!(
        listed
            .iter()
            .map(|s| (s.0.as_str(), s.1.as_str()))
            .collect::<Vec<_>>(),
        [(APP, "open")]
    );
    assert_eq!(
        sender_calls(g.sender.as_ref().unwrap(), "open").len(),
        1,
        "never opened again"
    );
    let output = worker.signal_output("TERM", Duration::from_secs(30));
    assert!(!output.contains(git_token()));
}
