//! The Kubernetes walk-throughs of README.md and docs/kubernetes.md run as written against the
//! TLS API server fake, as the Docker ones run against the Engine (tests/it/readme.rs): every
//! block marked `readme-test: run against the Kubernetes API fake`, in order, in one shell per
//! document section, as a reader types them, with the tests' `kubectl` (tests/it/kubectl.rs).
//! Only what truly needs kind (creating the cluster, loading the image) stays skipped; the
//! shell starts where that block leaves a reader: `bin` naming the built binaries and a
//! kubeconfig for the cluster. Each test asserts what the blocks leave behind, in the fake and
//! in the worker's own answers, not only their exit codes.

use crate::kube_e2e::k8s_namespace;
use crate::kube_fake::{FakeOptions, KubeFake, KubeconfigAuth};
use crate::readme::{blocks, scratch_checkout_for, Marker, Scratch};
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The blocks marked to run against the fake in the section of `page` under `heading` (up to
/// the next heading of the same level), with their lines.
fn section_blocks(page: &str, heading: &str) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).unwrap();
    let start = text
        .lines()
        .position(|l| l == heading)
        .unwrap_or_else(|| panic!("{page} has {heading}"));
    let level = heading.split(' ').next().unwrap();
    let end = text
        .lines()
        .enumerate()
        .skip(start + 1)
        .find(|(_, l)| l.split(' ').next() == Some(level))
        .map_or(usize::MAX, |(i, _)| i);
    let found: Vec<(usize, String)> = blocks(&text)
        .into_iter()
        .filter(|(line, marker, _)| *marker == Marker::Fake && *line > start && *line <= end)
        .map(|(line, _, text)| (line, text))
        .collect();
    assert!(!found.is_empty(), "{page}, {heading}: no block runs");
    found
}

/// Stops the PostgreSQL a walk-through started with `scripts/pg-start DIR` (before the scratch
/// checkout that holds it goes).
struct PgStop<'a>(&'a Scratch, &'static str);

impl Drop for PgStop<'_> {
    fn drop(&mut self) {
        let _ = Command::new(self.0.checkout.join("scripts/pg-stop"))
            .args(["--reset", self.1])
            .current_dir(&self.0.checkout)
            .status();
    }
}

/// The bash of a section: the `kubectl` stand-in, `prelude`, the blocks of `page` and
/// `trailer`; every job is killed at the end.
fn section_script(
    fake: &KubeFake,
    scratch: &Scratch,
    page: &str,
    blocks: &[(usize, String)],
    prelude: &str,
    trailer: &str,
) -> String {
    let mut script = format!(
        "set -euo pipefail\nset -x\n{}trap 'kill $(jobs -p) 2> /dev/null || true' EXIT\n{prelude}\n",
        crate::kubectl::stand_in(fake, &scratch.checkout)
    );
    for (line, text) in blocks {
        script.push_str(&format!("# {page}:{line}\n{text}"));
    }
    script.push_str(trailer);
    script
}

/// Starts `command` (a bash running a section's script) in the scratch checkout with the
/// reader's environment (`PATH`, `HOME`, a kubeconfig for the fake, and `env`), its output to
/// the returned log file, in a process group of its own.
fn spawn_section(
    fake: &KubeFake,
    scratch: &Scratch,
    mut command: Command,
    env: &[(&str, String)],
) -> (std::process::Child, std::path::PathBuf) {
    let kubeconfig = fake.write_kubeconfig(&scratch.base, KubeconfigAuth::Token);
    let log = scratch.base.join("walk-through.log");
    let out = std::fs::File::create(&log).unwrap();
    command
        .current_dir(&scratch.checkout)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_else(|_| "/".into()))
        .env("KUBECONFIG", &kubeconfig)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0);
    (command.spawn().expect("bash"), log)
}

/// Waits for a section's bash to end (killing its process group after 400 s); whether it
/// succeeded and everything it printed.
fn finish_section(mut child: std::process::Child, log: &Path) -> (bool, String) {
    let status = crate::support::child_exit(&mut child, Duration::from_secs(400));
    if status.is_none() {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .status();
        let _ = child.wait();
    }
    let output = std::fs::read_to_string(log).unwrap_or_default();
    (status.is_some_and(|s| s.success()), output)
}

/// Runs `blocks` of `page` in one bash, in the scratch checkout, after `prelude` and the
/// `kubectl` stand-in, then `trailer`. Returns whether it succeeded and everything it printed.
fn run_section(
    fake: &KubeFake,
    scratch: &Scratch,
    page: &str,
    blocks: &[(usize, String)],
    prelude: &str,
    trailer: &str,
) -> (bool, String) {
    let mut bash = Command::new("bash");
    bash.arg("-c").arg(section_script(
        fake, scratch, page, blocks, prelude, trailer,
    ));
    let (child, log) = spawn_section(fake, scratch, bash, &[]);
    finish_section(child, &log)
}

/// A bash whose `/etc` is the host's under a private, writable overlay (a mount namespace of
/// its own, as root of a user namespace): what it writes there is gone with it. None when
/// this machine allows neither.
fn bash_with_private_etc(scratch: &Scratch, script: &str) -> Option<Command> {
    let layer = scratch.base.join("etc-layer");
    std::fs::create_dir_all(&layer).unwrap();
    let wrapped = |script: &str| {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--map-root-user", "bash", "-c"])
            .arg(
                "mount -t tmpfs tmpfs \"$0\" && mkdir \"$0/upper\" \"$0/work\" \
                 && mount -t overlay overlay -o \"lowerdir=/etc,upperdir=$0/upper,workdir=$0/work\" /etc \
                 && exec bash -c \"$1\"",
            )
            .arg(&layer)
            .arg(script);
        c
    };
    let probe = wrapped("mkdir /etc/occ-probe")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: no private mount namespace with an overlay on /etc here");
        return None;
    }
    Some(wrapped(script))
}

fn json_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

// docs/kubernetes.md, "On kind": after the cluster's creation, the recipe, the workspace setup,
// the lifecycle hook and the Git access steps run in one shell as written. The Namespace goes
// ready once the step's RoleBinding exists, revision 1 activates with the step's Secret, the
// setup completes by revision 2, the hook refuses revision 3 before anything is written, and
// revision 4 gets the Git credential from the step's Secret, its session closed by the stop.
#[test]
fn the_kind_walk_through_runs_block_by_block_against_the_fake() {
    let _ports = crate::support::take_turn(crate::support::Turn::DocumentedPorts);
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(50),
        pod_termination: Duration::from_millis(50),
        resolve_secret_refs: true,
        ..FakeOptions::default()
    });
    let scratch = scratch_checkout_for("kube-guide");
    let _pg = PgStop(&scratch, "target/pg-kind");
    let page = "docs/kubernetes.md";
    let blocks = section_blocks(page, "## On kind");
    assert_eq!(blocks.len(), 4, "the recipe and its three steps");
    let state = ".kubectl";
    let (ok, output) = run_section(
        &fake,
        &scratch,
        page,
        &blocks,
        // What the skipped block leaves: the binaries (here the debug ones).
        "bin=target/debug",
        &format!(
            "$occ admin namespace show team-a --json > {state}/team-a.json\n\
             $occ admin agent show team-a helper --json > {state}/helper.json\n"
        ),
    );
    assert!(ok, "the kind walk-through failed:\n{output}");
    let dir = &scratch.checkout;

    // The recipe: rbac.yaml applied, the Namespace ready once the RoleBinding the step created
    // exists, the harness Secret the step created.
    assert!(fake
        .get("/apis/rbac.authorization.k8s.io/v1/clusterroles/occ-worker")
        .is_some());
    let team_a = json_file(&dir.join(state).join("team-a.json"));
    assert_eq!(team_a["status"], "ready", "{team_a}");
    let ns = team_a["kubernetesNamespace"].as_str().unwrap().to_string();
    let namespace = fake.get(&format!("/api/v1/namespaces/{ns}")).unwrap();
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let binding = fake
        .get(&format!(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/occ-tenant"
        ))
        .expect("the step's RoleBinding");
    assert_eq!(binding["roleRef"]["name"], "edit");
    assert_eq!(binding["subjects"][0]["kind"], "Group");
    assert_eq!(binding["subjects"][0]["name"], "tenant");
    let harness = fake
        .get(&format!("/api/v1/namespaces/{ns}/secrets/harness"))
        .expect("the step's Secret");
    assert_eq!(harness["data"]["api-key"], b64("not-a-real-key"));
    assert!(
        output.contains(&format!("namespace/{ns} condition met")),
        "{output}"
    );
    // `get deployments,pods,services` showed the hardened runtime ready.
    assert!(
        output
            .lines()
            .any(|l| l.starts_with("deployment.apps/agent-") && l.contains("\t1/1\t")),
        "{output}"
    );

    // The revisions, one per step: activated, activated with the setup, refused by the hook,
    // activated with the repository and then stopped.
    let helper = json_file(&dir.join(state).join("helper.json"));
    let revisions = helper["revisions"].as_array().expect("revisions");
    let codes: Vec<(i64, String)> = revisions
        .iter()
        .map(|r| {
            (
                r["revision"].as_i64().unwrap_or(0),
                r["reasonCode"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        codes.contains(&(3, "TEAM_FROZEN".into())),
        "the hook refused revision 3: {helper}"
    );
    let agent = helper["id"].as_str().unwrap().to_string();
    assert!(
        fake.get(&format!(
            "{}/namespaces/{ns}/deployments/agent-{agent}-r3",
            crate::kubernetes::APPS
        ))
        .is_none(),
        "nothing was written for revision 3"
    );
    let calls = std::fs::read_to_string(dir.join("target/kind-hook/calls.log")).unwrap();
    assert!(
        calls.contains("beforeWorkloadStart") && calls.contains("TEAM_FROZEN"),
        "{calls}"
    );
    // The workspace setup: completed by revision 2, as `workspace-setup show` said.
    let r2 = revisions
        .iter()
        .find(|r| r["revision"] == 2)
        .expect("revision 2");
    assert_eq!(r2["reasonCode"], "REVISION_ACTIVATED", "{r2}");
    assert!(
        output.contains("completed: true")
            && output.contains(&format!(
                "completedRevisionId: {}",
                r2["id"].as_str().unwrap()
            )),
        "{output}"
    );
    // Git access: the step's Secret, the session opened and closed, never the token.
    let git = fake
        .get(&format!("/api/v1/namespaces/{ns}/secrets/git-acme-app"))
        .expect("the step's Secret");
    assert_eq!(git["data"]["token"], b64("not-a-real-token"));
    let sender: Vec<String> = std::fs::read_to_string(dir.join("target/kind-git/calls.log"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "sender.call")
        .map(|e| {
            format!(
                "{}:{}",
                e["call"].as_str().unwrap_or(""),
                e["outcome"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(sender, ["open:opened", "close:closed"]);
    let worker_log = std::fs::read_to_string(dir.join("target/kind-worker.log")).unwrap();
    assert!(!worker_log.contains("not-a-real-token") && !worker_log.contains("not-a-real-key"));
}

// docs/kubernetes.md, the worker inside the cluster: the block creates occ-system and the
// database Secret and applies the kustomization, which leaves the worker's Deployment (the
// pinned image, the generated driver ConfigMap mounted) rolled out with its two replicas, its
// ServiceAccount bound to the ClusterRole, and the PodDisruptionBudget.
#[test]
fn the_in_cluster_install_runs_against_the_fake() {
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        ..FakeOptions::default()
    });
    let scratch = scratch_checkout_for("kube-install");
    let page = "docs/kubernetes.md";
    let blocks = section_blocks(page, "# Kubernetes guide");
    let install: Vec<(usize, String)> = blocks
        .into_iter()
        .filter(|(_, t)| t.contains("apply -k"))
        .collect();
    assert_eq!(install.len(), 1);
    let (ok, output) = run_section(&fake, &scratch, page, &install, "", "");
    assert!(ok, "the install failed:\n{output}");
    // rbac.yaml declares occ-system too: the kustomization configures what `create` made.
    for applied in [
        "namespace/occ-system configured",
        "clusterrole.rbac.authorization.k8s.io/occ-worker created",
        "deployment.apps/occ-worker created",
        "poddisruptionbudget.policy/occ-worker created",
    ] {
        assert!(output.lines().any(|l| l == applied), "{applied}: {output}");
    }
    assert!(fake.get("/api/v1/namespaces/occ-system").is_some());
    let secret = fake
        .get("/api/v1/namespaces/occ-system/secrets/occ-worker-database")
        .unwrap();
    assert_eq!(
        secret["data"]["url"],
        b64("postgres://occ@db.example:5432/occ?sslmode=verify-full")
    );
    assert!(fake
        .get("/api/v1/namespaces/occ-system/serviceaccounts/occ-worker")
        .is_some());
    let binding = fake
        .get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/occ-worker")
        .unwrap();
    assert_eq!(binding["roleRef"]["name"], "occ-worker");
    assert_eq!(binding["subjects"][0]["namespace"], "occ-system");
    assert!(fake
        .get("/apis/policy/v1/namespaces/occ-system/poddisruptionbudgets/occ-worker")
        .is_some());
    let deployment = fake
        .get("/apis/apps/v1/namespaces/occ-system/deployments/occ-worker")
        .unwrap();
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        spec["containers"][0]["image"],
        format!("occ-worker:{}", env!("CARGO_PKG_VERSION"))
    );
    let config_map = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| v["configMap"]["name"].as_str())
        .expect("the driver ConfigMap's volume")
        .to_string();
    assert!(config_map.starts_with("occ-worker-driver-"), "{config_map}");
    let driver = fake
        .get(&format!(
            "/api/v1/namespaces/occ-system/configmaps/{config_map}"
        ))
        .expect("the generated ConfigMap");
    assert_eq!(
        driver["data"]["driver.json"],
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/driver.json")
        )
        .unwrap()
    );
    crate::support::wait_for("the worker rolled out", Duration::from_secs(30), || {
        fake.get("/apis/apps/v1/namespaces/occ-system/deployments/occ-worker")
            .is_some_and(|d| d["status"]["availableReplicas"] == 2)
    });
}

// README.md's Kubernetes sections, in one shell after docs/kubernetes.md's kind recipe (which
// they continue) on a cluster with the RuntimeClass `gvisor`: the worker restarted with the
// Installation file pins the Sandbox Driver and its five facets into the deployment, whose
// Pods get the RuntimeClass; the sandbox policy's NetworkPolicy is written, shown and removed;
// the leaked tool source is revoked by a rollout, the model key once a revision with the
// other key replaced the runtime.
#[test]
fn the_readme_kubernetes_walk_throughs_run_block_by_block_against_the_fake() {
    let _ports = crate::support::take_turn(crate::support::Turn::DocumentedPorts);
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(50),
        pod_termination: Duration::from_millis(50),
        resolve_secret_refs: true,
        ..FakeOptions::default()
    });
    // The cluster has gVisor installed.
    fake.put_object(
        "/apis/node.k8s.io/v1/runtimeclasses",
        serde_json::json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                           "metadata": {"name": "gvisor"}, "handler": "runsc"}),
    );
    let scratch = scratch_checkout_for("kube-readme");
    let _pg = PgStop(&scratch, "target/pg-kind");
    let (recipe_line, recipe) = section_blocks("docs/kubernetes.md", "## On kind").remove(0);
    let mut blocks = section_blocks("README.md", "### Isolation: facets and egress");
    blocks.extend(section_blocks("README.md", "### Withdrawing a leaked key"));
    assert_eq!(blocks.len(), 2);
    let state = ".kubectl";
    let (ok, output) = run_section(
        &fake,
        &scratch,
        "README.md",
        &blocks,
        &format!("bin=target/debug\n# docs/kubernetes.md:{recipe_line}\n{recipe}"),
        &format!(
            "$occ admin agent show team-a helper --json > {state}/helper.json\n\
             timeout 60 sh -c 'until $0 admin withdrawal list team-a helper --json \
                 | jq -e \"length == 2 and all(.state == \\\"revoked\\\")\" > /dev/null; do sleep 0.2; done' $occ\n\
             $occ admin withdrawal list team-a helper --json > {state}/withdrawals.json\n"
        ),
    );
    assert!(
        ok,
        "the README's Kubernetes walk-throughs failed:\n{output}"
    );
    let dir = &scratch.checkout;
    let helper = json_file(&dir.join(state).join("helper.json"));
    let agent = helper["id"].as_str().unwrap().to_string();
    let ns = k8s_namespace(helper["namespaceId"].as_str().unwrap());
    let revision = |n: i64| {
        helper["revisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["revision"] == n)
            .unwrap_or_else(|| panic!("revision {n}: {helper}"))
            .clone()
    };
    // Isolation: revision 2 pinned the Sandbox Driver and its five facets, and the worker
    // restarted with the file activated it.
    let r2 = revision(2);
    assert_eq!(r2["reasonCode"], "REVISION_ACTIVATED", "{r2}");
    assert_eq!(r2["sandboxDriverId"], "sandbox-1");
    assert_eq!(r2["sandboxFacets"].as_array().unwrap().len(), 5, "{r2}");
    let harness = |n: i64| {
        fake.get(&format!(
            "{}/namespaces/{ns}/deployments/agent-{agent}-r{n}",
            crate::kubernetes::APPS
        ))
        .unwrap_or_else(|| panic!("revision {n}'s Harness Deployment"))
    };
    // The sandbox policy's NetworkPolicy was shown, then removed by the empty allowlist.
    let policy = format!("occ-egress-{agent}");
    assert!(
        output.contains(&format!("\"name\": \"{policy}\"")) && output.contains("10.20.0.0/16"),
        "{output}"
    );
    assert!(fake
        .get(&format!(
            "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{policy}"
        ))
        .is_none());
    // The leaked key: revision 3 had both sources; both withdrawals are revoked, requested by
    // admin; revision 4 runs on the other key, without the tool source.
    let r3 = revision(3);
    assert_eq!(r3["credentialSources"].as_array().unwrap().len(), 2, "{r3}");
    let withdrawals = json_file(&dir.join(state).join("withdrawals.json"));
    let mut rows: Vec<(String, String, String, i64)> = withdrawals
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["sourceId"].as_str().unwrap_or("").to_string(),
                w["state"].as_str().unwrap_or("").to_string(),
                w["requestedBy"].as_str().unwrap_or("").to_string(),
                w["revision"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        [
            ("model".into(), "revoked".into(), "admin".into(), 3),
            ("search".into(), "revoked".into(), "admin".into(), 3)
        ]
    );
    assert!(output.contains("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT"));
    let r4 = revision(4);
    assert_eq!(
        (&r4["state"], &r4["reasonCode"]),
        (
            &serde_json::json!("active"),
            &serde_json::json!("REVISION_ACTIVATED")
        )
    );
    let env: Vec<Value> = harness(4)["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["env"].as_array().cloned().unwrap_or_default())
        .collect();
    let key = env
        .iter()
        .find(|e| e["name"] == "OCC_HARNESS_API_KEY")
        .expect("the model key");
    assert_eq!(
        key["valueFrom"]["secretKeyRef"],
        serde_json::json!({"name": "llm", "key": "key-2"})
    );
    assert!(!env.iter().any(|e| e["name"] == "OCC_CREDENTIAL_SEARCH"));
    // Every revision since the restart pins the Sandbox Driver: the RuntimeClass on its Pods.
    assert_eq!(r4["sandboxDriverId"], "sandbox-1");
    assert_eq!(
        harness(4)["spec"]["template"]["spec"]["runtimeClassName"],
        "gvisor"
    );
}

// docs/kubernetes.md, on a real cluster from this repository: with the operator's database
// (`OCC_DATABASE_URL`) and `occ-worker` on PATH, the block applies rbac.yaml, writes the driver
// file to /etc/occ (here a private overlay of /etc, gone with the shell), and `check` passes
// before `run` starts the worker, which serves until it is told to stop: SIGTERM, as Ctrl-C
// would, and the block ends with exit 0.
#[test]
fn the_real_cluster_steps_run_against_the_fake() {
    let fake = KubeFake::start(FakeOptions::default());
    let scratch = scratch_checkout_for("kube-real");
    let page = "docs/kubernetes.md";
    let steps: Vec<(usize, String)> = section_blocks(page, "# Kubernetes guide")
        .into_iter()
        .filter(|(_, t)| t.contains("mkdir -p /etc/occ"))
        .collect();
    assert_eq!(steps.len(), 1);
    let installed = scratch.checkout.join("target/debug").display().to_string();
    let script = section_script(
        &fake,
        &scratch,
        page,
        &steps,
        &format!("export PATH={installed}:$PATH   # occ-worker installed"),
        "",
    );
    let host_had_one = Path::new("/etc/occ/driver.json").exists();
    let Some(bash) = bash_with_private_etc(&scratch, &script) else {
        return;
    };
    let db = crate::support::TestDb::bootstrapped();
    let (mut child, log) = spawn_section(
        &fake,
        &scratch,
        bash,
        &[
            ("OCC_DATABASE_URL", db.url.clone()),
            ("OCC_WORKER_HTTP_ADDR", "127.0.0.1:0".into()),
        ],
    );
    let mut started = None;
    crate::support::wait_for("the worker started", Duration::from_secs(60), || {
        let output = std::fs::read_to_string(&log).unwrap_or_default();
        started = output
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["event"] == "worker.started");
        started.is_some() || child.try_wait().ok().flatten().is_some()
    });
    let started = started.unwrap_or_else(|| {
        panic!(
            "the worker never started:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    assert_eq!(started["computeDriverId"], "kubernetes", "{started}");
    let pid = started["pid"]
        .as_i64()
        .expect("the worker's pid")
        .to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let (ok, output) = finish_section(child, &log);
    assert!(ok, "the steps failed:\n{output}");
    // rbac.yaml applied; `check` answered ok (the RBAC reviews, the version) before `run`.
    assert!(fake
        .get("/apis/rbac.authorization.k8s.io/v1/clusterroles/occ-worker")
        .is_some());
    assert!(output.contains("status: ok"), "{output}");
    assert!(output.contains("\"event\":\"worker.stopped\""), "{output}");
    let reviews = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/selfsubjectaccessreviews"))
        .count();
    assert!(
        reviews > 0,
        "check and run asked the API server verb by verb"
    );
    assert_eq!(
        Path::new("/etc/occ/driver.json").exists(),
        host_had_one,
        "the driver file stayed in the shell's own /etc"
    );
}

// The stand-in does what the walk-throughs type and refuses anything else in one line, exit 1:
// another verb, a manifest outside deploy/kubernetes, a `get` of a type no walk-through reads.
#[test]
fn the_kubectl_stand_in_refuses_what_no_walk_through_types() {
    let fake = KubeFake::start(FakeOptions::default());
    let scratch = scratch_checkout_for("kubectl-refusals");
    for (command, said) in [
        (
            "kubectl delete namespace occ-system",
            "kubectl stand-in: not supported: delete namespace occ-system",
        ),
        (
            "kubectl apply -f other.yaml",
            "kubectl stand-in: not supported: apply -f other.yaml (only deploy/kubernetes manifests)",
        ),
        (
            "kubectl -n occ-system get secrets",
            "kubectl stand-in: not supported: get secrets",
        ),
        (
            "kubectl create namespace",
            "kubectl stand-in: not supported: create namespace",
        ),
    ] {
        let script = section_script(&fake, &scratch, "test", &[], "set +x", command);
        let out = Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(&scratch.checkout)
            .output()
            .expect("bash");
        assert_eq!(out.status.code(), Some(1), "{command}");
        // The script's own trace (`set -x` until the prelude's `set +x`) aside.
        let stderr = String::from_utf8_lossy(&out.stderr);
        let said_lines: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("+ ")).collect();
        assert_eq!(said_lines, [said], "{command}");
    }
    assert!(fake.writes().is_empty(), "{:?}", fake.writes());
}
