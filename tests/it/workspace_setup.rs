//! SPEC §18, workspace setup: the record and its admission (WS1), the support check in the
//! Secret step (WS2), the setup handed to Compute and the Kubernetes init container (WS3),
//! completion in the activation's fenced transaction (WS4) and the workspace codes (WS5).
//! Admission runs through the CLI against PostgreSQL; passes run through a real worker on the
//! scripted driver, the Docker driver (refused before any call) and the TLS Kubernetes fake.

use crate::agent::{audits, deploy, evidence, fixture, work, Fixture};
use crate::cli::run;
use crate::kube_fake::{FakeOptions, PodBehaviour};
use crate::kubernetes::{
    agent_objects, agent_world_with, deploy_kube, deployment, env_var, methods, rkey, AgentWorld,
    NS1, SETTINGS,
};
use crate::scripted::{quiet, run_until, run_with, Opts, Prepare, ScriptedDriver};
use occ_worker::compute::docker::DockerDriver;
use postgres::Client as Sql;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The Kubernetes driver settings with the reference setup image.
fn with_setup_image(settings: &str) -> String {
    settings.replacen(
        '{',
        r#"{"workspaceSetupImage": "registry.example/occ-harness:1.0.0", "#,
        1,
    )
}

/// A file holding `body` in the system temp dir, removed on drop.
struct File(std::path::PathBuf);

impl File {
    fn with(name: &str, body: &[u8]) -> File {
        let path = std::env::temp_dir().join(format!("occ-ws-{}-{name}", std::process::id()));
        std::fs::write(&path, body).unwrap();
        File(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `admin agent workspace-setup ARGS --json` in `ns1` for the Agent: (exit, JSON or stderr).
fn cli(url: &str, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["admin", "agent", "workspace-setup"];
    all.extend_from_slice(args);
    all.push("--json");
    let (code, stdout, stderr) = run(Some(url), &all);
    let value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (code, value, stderr)
}

/// Puts a setup through SQL, as an admission API would: its id.
fn put(c: &mut Sql, agent: &str, document: Value) -> String {
    let v: Value = crate::support::one(
        c,
        "SELECT occ.workspace_setup_put('admin', 'ns1', $1, $2)",
        &[&agent, &document],
    );
    v["id"].as_str().unwrap().to_string()
}

/// (id, completed revision) of the Agent's setup.
fn setup(c: &mut Sql, agent: &str) -> Option<(String, Option<String>)> {
    c.query_opt(
        "SELECT id, completed_revision_id FROM occ.workspace_setups WHERE agent_id = $1",
        &[&agent],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

fn work_rows(c: &mut Sql) -> i64 {
    c.query_one("SELECT count(*) FROM occ.work", &[])
        .unwrap()
        .get(0)
}

// ---------------------------------------------------------------------------------------------
// WS1: the record and its admission
// ---------------------------------------------------------------------------------------------

#[test]
fn ws1_put_replaces_with_a_new_incomplete_id_audits_and_queues_nothing() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    let queued = work_rows(&mut c);
    let first = File::with("first.json", br#"{"repositories": ["acme/app"]}"#);
    let (code, put1, stderr) = cli(
        &db.url,
        &[
            "put",
            "ns1",
            "bot",
            "--file",
            first.path(),
            "--actor",
            "admin",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let id1 = put1["id"].as_str().unwrap().to_string();
    assert!(
        id1.len() == 11
            && id1.starts_with("ws-")
            && id1[3..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{id1}"
    );
    assert_eq!(
        put1,
        json!({"agentId": agent, "id": id1, "completed": false, "previousId": null})
    );
    let second = File::with("second.json", br#"{"repositories": ["acme/lib"]}"#);
    let (code, put2, stderr) = cli(
        &db.url,
        &[
            "put",
            "ns1",
            &agent,
            "--file",
            second.path(),
            "--actor",
            "admin",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let id2 = put2["id"].as_str().unwrap().to_string();
    assert_ne!(id1, id2, "a new id on every put");
    assert_eq!(put2["previousId"], id1.as_str());
    assert_eq!(put2["completed"], false);
    // One record, the latest, incomplete; shown with its document.
    let (code, shown, _) = cli(&db.url, &["show", "ns1", "bot"]);
    assert_eq!(code, 0);
    assert_eq!(shown["id"], id2.as_str());
    assert_eq!(shown["document"], json!({"repositories": ["acme/lib"]}));
    assert_eq!(shown["completed"], false);
    assert_eq!(shown["completedAt"], Value::Null);
    assert_eq!(shown["completedRevisionId"], Value::Null);
    let (code, agent_shown, _) = {
        let (code, stdout, stderr) = run(
            Some(&db.url),
            &["admin", "agent", "show", "ns1", "bot", "--json"],
        );
        (
            code,
            serde_json::from_str::<Value>(&stdout).unwrap(),
            stderr,
        )
    };
    assert_eq!(code, 0);
    assert_eq!(
        agent_shown["workspaceSetup"],
        json!({"id": id2, "completed": false, "completedAt": null, "completedRevisionId": null})
    );
    // Audited each time, naming the replaced id; nothing queued.
    let admitted = audits(&mut c, "openclaw.agents.workspace_setup.admit");
    assert_eq!(admitted.len(), 2, "{admitted:?}");
    let details: Vec<Value> = c
        .query(
            "SELECT details FROM occ.audit_events WHERE action = 'openclaw.agents.workspace_setup.admit' ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(details[0]["setupId"], id1.as_str());
    assert_eq!(details[0].get("previousSetupId"), None);
    assert_eq!(details[1]["setupId"], id2.as_str());
    assert_eq!(details[1]["previousSetupId"], id1.as_str());
    assert_eq!(work_rows(&mut c), queued, "a put queues nothing");
}

#[test]
fn ws1_bad_input_writes_nothing() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    c.query_one("SELECT occ.identity_create('admin', 'mallory')", &[])
        .unwrap();
    let good = File::with("good.json", br#"{"a": 1}"#);
    let array = File::with("array.json", b"[1, 2]");
    let prose = File::with("prose.json", b"not json");
    let mut big = b"{\"pad\": \"".to_vec();
    big.extend(std::iter::repeat_n(b'x', 65_536));
    big.extend(b"\"}");
    let big = File::with("big.json", &big);
    let missing = std::env::temp_dir().join("occ-ws-no-such-file.json");
    let missing = missing.to_str().unwrap();
    let refused = |args: &[&str]| {
        let mut all = vec!["admin", "agent", "workspace-setup", "put"];
        all.extend_from_slice(args);
        let (code, _, stderr) = run(Some(&db.url), &all);
        (code, stderr)
    };
    let cases: Vec<(Vec<&str>, i32, String)> = vec![
        (
            vec!["ns1", "bot", "--file", array.path(), "--actor", "admin"],
            2,
            format!("--file {} holds JSON but not an object: a workspace setup is one JSON object", array.path()),
        ),
        (
            vec!["ns1", "bot", "--file", prose.path(), "--actor", "admin"],
            2,
            format!("--file {} is not JSON: expected ident at line 1 column 2 (a workspace setup is one JSON object)", prose.path()),
        ),
        (
            vec!["ns1", "bot", "--file", big.path(), "--actor", "admin"],
            2,
            format!("--file {} is larger than 64 KiB (65536 bytes), the limit for a workspace setup", big.path()),
        ),
        (
            vec!["ns1", "bot", "--file", missing, "--actor", "admin"],
            2,
            format!("--file {missing}: cannot read it: No such file or directory (os error 2)"),
        ),
        (
            vec!["ns1", "ghost", "--file", good.path(), "--actor", "admin"],
            1,
            String::new(),
        ),
        (
            vec!["nope", "bot", "--file", good.path(), "--actor", "admin"],
            1,
            String::new(),
        ),
        (
            vec!["ns1", "bot", "--file", good.path(), "--actor", "mallory"],
            1,
            String::new(),
        ),
    ];
    for (args, code, message) in &cases {
        let (got, stderr) = refused(args);
        assert_eq!(got, *code, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(message.as_str()), "{args:?}: {stderr}");
    }
    c.execute(
        "UPDATE occ.agents SET status = 'deleting', desired_runtime_state = 'stopped' WHERE id = $1",
        &[&agent],
    )
    .unwrap();
    let (got, stderr) = refused(&["ns1", "bot", "--file", good.path(), "--actor", "admin"]);
    assert_eq!(got, 1, "{stderr}");
    assert!(stderr.contains("is being deleted"), "{stderr}");
    assert_eq!(setup(&mut c, &agent), None, "nothing written");
    assert!(audits(&mut c, "openclaw.agents.workspace_setup.admit").is_empty());
    // PostgreSQL holds the rules too, whoever writes.
    for document in [json!([1]), json!({"pad": "x".repeat(65_536)})] {
        let e = c
            .query_one(
                "INSERT INTO occ.workspace_setups (agent_id, namespace_id, id, document, created_by)
                 VALUES ($1, 'ns1', 'ws-0000000a', $2, 'admin') RETURNING id",
                &[&agent, &document],
            )
            .unwrap_err();
        assert_eq!(
            e.as_db_error().map(|d| d.constraint()),
            Some(Some("workspace_setups_document_check")),
            "{e}"
        );
    }
    let e = c
        .query_one(
            "INSERT INTO occ.workspace_setups (agent_id, namespace_id, id, document, created_by)
             VALUES ($1, 'ns1', 'setup-1', '{}', 'admin') RETURNING id",
            &[&agent],
        )
        .unwrap_err();
    assert_eq!(
        e.as_db_error().and_then(|d| d.constraint()),
        Some("workspace_setups_id_check"),
        "{e}"
    );
}

#[test]
fn ws1_clear_removes_the_record_or_refuses() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    let (code, _, stderr) = cli(&db.url, &["clear", "ns1", "bot", "--actor", "admin"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr,
        format!("occ-worker: agent workspace-setup clear refused: agent ns1/{agent} has no workspace setup\n")
    );
    let id = put(&mut c, &agent, json!({"a": 1}));
    c.query_one("SELECT occ.identity_create('admin', 'mallory')", &[])
        .unwrap();
    let (code, _, stderr) = cli(&db.url, &["clear", "ns1", "bot", "--actor", "mallory"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(setup(&mut c, &agent).map(|s| s.0), Some(id.clone()));
    let (code, cleared, stderr) = cli(&db.url, &["clear", "ns1", "bot", "--actor", "admin"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(cleared, json!({"agentId": agent, "cleared": id}));
    assert_eq!(setup(&mut c, &agent), None);
    assert_eq!(
        audits(&mut c, "openclaw.agents.workspace_setup.clear"),
        vec![(
            "mutation".to_string(),
            "success".to_string(),
            None,
            agent.clone()
        )]
    );
    let (code, shown, _) = cli(&db.url, &["show", "ns1", "bot"]);
    assert_eq!((code, shown), (0, Value::Null));
    let (code, _, _) = cli(&db.url, &["clear", "ns1", "bot", "--actor", "admin"]);
    assert_eq!(code, 1);
}

// ---------------------------------------------------------------------------------------------
// WS2: the support check
// ---------------------------------------------------------------------------------------------

#[test]
fn ws2_a_setup_without_support_is_refused_before_any_compute_call() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    // Completed or not: a record is enough.
    put(&mut c, &agent, json!({"a": 1}));
    let rev = deploy(&mut c, &agent);
    let driver = Arc::new(ScriptedDriver::new());
    run_until(&db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("WORKSPACE_SETUP_UNSUPPORTED");
    assert!(driver.log().is_empty(), "{:?}", driver.log());
    // The same Agent deploys once its setup is cleared.
    c.query_one(
        "SELECT occ.workspace_setup_clear('admin', 'ns1', $1)",
        &[&agent],
    )
    .unwrap();
    let rev = deploy(&mut c, &agent);
    run_until(&db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).completed_with("REVISION_ACTIVATED");
}

#[test]
fn ws2_the_active_revision_takes_the_active_path() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_millis(300)),
        ..ScriptedDriver::default()
    });
    let rev = deploy(&mut c, &agent);
    run_until(&db, driver.clone(), |c| {
        work(c, &rkey(&rev)).0 == "succeeded"
    });
    put(&mut c, &agent, json!({"a": 1}));
    let failed = |c: &mut Sql| -> Vec<String> {
        c.query(
            "SELECT idempotency_key FROM occ.work_status WHERE idempotency_key LIKE $1
               AND state = 'failed_permanent' AND reason_code = 'WORKSPACE_SETUP_UNSUPPORTED'",
            &[&format!("agent_revision:{rev}:maintenance:%")],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    run_until(&db, driver.clone(), |c| !failed(c).is_empty());
    // The maintenance claim failed and kept its chain; nothing was stopped.
    let next: i64 = c
        .query_one(
            "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE $1 AND state = 'queued'",
            &[&format!("agent_revision:{rev}:maintenance:%")],
        )
        .unwrap()
        .get(0);
    assert_eq!(next, 1, "the chain goes on");
    assert_eq!(crate::agent::active(&mut c, &agent), Some(rev.clone()));
    assert!(driver.calls_of("stop_revision").is_empty());
}

#[test]
fn ws2_docker_refuses_an_agent_with_a_setup() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    put(&mut c, &agent, json!({"a": 1}));
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'docker', 'docker')",
        &[&agent],
    );
    let rev = v["revisionId"].as_str().unwrap().to_string();
    // No Engine answers here: a refusal after any call would be a connection error instead.
    let driver = Arc::new(DockerDriver::new("unix:///nonexistent/docker.sock").expect("driver"));
    run_until(&db, driver, quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("WORKSPACE_SETUP_UNSUPPORTED");
}

#[test]
fn ws2_kubernetes_refuses_embedded_and_a_driver_file_without_the_image() {
    // Without the image: a dedicated revision is refused, and nothing is written.
    let w = agent_world_with(FakeOptions::default(), SETTINGS);
    let mut c = w.db.client();
    put(&mut c, &w.agent, json!({"a": 1}));
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("WORKSPACE_SETUP_UNSUPPORTED");
    assert!(
        w.kube.writes().is_empty(),
        "{:?}",
        methods(&w.kube.writes())
    );
    // With it: an embedded revision has no persistent workspace of its own.
    let w = agent_world_with(FakeOptions::default(), &with_setup_image(SETTINGS));
    let mut c = w.db.client();
    put(&mut c, &w.agent, json!({"a": 1}));
    let rev = deploy_kube(&mut c, &w.agent, "openclaw", "embedded", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("WORKSPACE_SETUP_UNSUPPORTED");
    assert!(
        w.kube.writes().is_empty(),
        "{:?}",
        methods(&w.kube.writes())
    );
}

// ---------------------------------------------------------------------------------------------
// WS3: the setup to Compute, the Kubernetes init container
// ---------------------------------------------------------------------------------------------

/// A Kubernetes world with the setup image and, when `interval`, maintenance.
fn setup_world(interval: bool) -> AgentWorld {
    let mut settings = with_setup_image(SETTINGS);
    if interval {
        settings = settings.replacen('{', r#"{"maintenanceIntervalSeconds": 1, "#, 1);
    }
    agent_world_with(FakeOptions::default(), &settings)
}

/// The init containers of the revision's Harness Deployment.
fn init_containers(w: &AgentWorld, revision: i32) -> Vec<Value> {
    let name = format!("agent-{}-r{revision}", w.agent);
    deployment(w, &name).expect("Harness Deployment")["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn ws3_the_fake_sees_the_init_container_and_env() {
    let w = setup_world(false);
    let mut c = w.db.client();
    let document = json!({"repositories": ["acme/app"], "branch": "main"});
    let id = put(&mut c, &w.agent, document.clone());
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).completed_with("REVISION_ACTIVATED");
    let inits = init_containers(&w, 1);
    assert_eq!(inits.len(), 1, "{inits:?}");
    let init = &inits[0];
    assert_eq!(init["name"], "workspace-setup");
    assert_eq!(init["image"], "registry.example/occ-harness:1.0.0");
    assert_eq!(init["args"], json!(["workspace-setup"]));
    assert_eq!(
        env_var(init, "OCC_WORKSPACE_SETUP_ID")["value"],
        id.as_str()
    );
    let shown: Value = serde_json::from_str(
        env_var(init, "OCC_WORKSPACE_SETUP")["value"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(shown, document);
    // On the Harness claim, hardened like the Harness.
    assert!(init["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == "harness" && m["mountPath"] == "/var/lib/harness"));
    let hardened = &init["securityContext"];
    assert_eq!(hardened["readOnlyRootFilesystem"], true);
    assert_eq!(hardened["allowPrivilegeEscalation"], false);
    assert_eq!(hardened["capabilities"], json!({"drop": ["ALL"]}));
    assert_eq!(init.get("readinessProbe"), None);
    // The kubelet ran it to completion before the Harness.
    let pods = agent_objects(&w, "pods");
    let statuses: Vec<&Value> = pods
        .iter()
        .filter_map(|p| p["status"]["initContainerStatuses"].as_array())
        .flatten()
        .collect();
    assert!(
        statuses
            .iter()
            .any(|s| s["state"]["terminated"]["reason"] == "Completed"),
        "{statuses:?}"
    );
    // The gateway carries none.
    let gateway = deployment(&w, &format!("agent-{}-gateway", w.agent)).expect("gateway");
    assert_eq!(
        gateway["spec"]["template"]["spec"].get("initContainers"),
        None
    );
}

#[test]
fn ws3_completing_the_setup_changes_nothing_in_the_deployment() {
    let w = setup_world(true);
    let mut c = w.db.client();
    put(&mut c, &w.agent, json!({"a": 1}));
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), |c| {
        work(c, &rkey(&rev)).0 == "succeeded"
    });
    assert_eq!(setup(&mut c, &w.agent).unwrap().1, Some(rev.clone()));
    let name = format!("agent-{}-r1", w.agent);
    let before = deployment(&w, &name).unwrap()["metadata"]["annotations"].clone();
    let succeeded = |c: &mut Sql| -> i64 {
        c.query_one(
            "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE $1 AND state = 'succeeded'",
            &[&format!("agent_revision:{rev}:maintenance:%")],
        )
        .unwrap()
        .get(0)
    };
    let done = succeeded(&mut c);
    w.kube.fake.clear_requests();
    run_until(&w.db, w.kube.driver.clone(), |c| succeeded(c) > done);
    assert!(
        w.kube.writes().is_empty(),
        "{:?}",
        methods(&w.kube.writes())
    );
    assert_eq!(
        deployment(&w, &name).unwrap()["metadata"]["annotations"],
        before
    );
}

#[test]
fn ws3_a_new_put_rolls_the_next_preparation() {
    let w = setup_world(true);
    let mut c = w.db.client();
    let first = put(&mut c, &w.agent, json!({"a": 1}));
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), |c| {
        work(c, &rkey(&rev)).0 == "succeeded"
    });
    assert_eq!(
        env_var(&init_containers(&w, 1)[0], "OCC_WORKSPACE_SETUP_ID")["value"],
        first.as_str()
    );
    let second = put(&mut c, &w.agent, json!({"a": 2}));
    // The next maintenance pass carries it: the template changes, and the pass completes it.
    run_until(&w.db, w.kube.driver.clone(), |c| {
        setup(c, &w.agent) == Some((second.clone(), Some(rev.clone())))
    });
    assert_eq!(
        env_var(&init_containers(&w, 1)[0], "OCC_WORKSPACE_SETUP_ID")["value"],
        second.as_str()
    );
}

// ---------------------------------------------------------------------------------------------
// WS4: completion on activation
// ---------------------------------------------------------------------------------------------

#[test]
fn ws4_activation_completes_the_setup_in_its_tx() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    let id = put(&mut c, &agent, json!({"a": 1}));
    let rev = deploy(&mut c, &agent);
    let driver = Arc::new(ScriptedDriver {
        workspace_setup: true,
        ..ScriptedDriver::default()
    });
    run_until(&db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).completed_with("REVISION_ACTIVATED");
    // Handed to Compute with the revision.
    let prepared = driver.prepared.lock().clone();
    assert_eq!(
        prepared
            .last()
            .and_then(|r| r.workspace_setup.as_ref())
            .map(|s| (s.id.clone(), s.document.clone())),
        Some((id.clone(), json!({"a": 1})))
    );
    // Completed by this revision, after the activation's own pointer commit, on the database
    // clock and in the same transaction as the completion.
    let row = c
        .query_one(
            "SELECT s.completed_revision_id, s.completed_at IS NOT NULL,
                    s.completed_at <= w.updated_at
             FROM occ.workspace_setups s, occ.work w
             WHERE s.agent_id = $1 AND w.idempotency_key = $2",
            &[&agent, &rkey(&rev)],
        )
        .unwrap();
    let (by, stamped, within): (Option<String>, bool, bool) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((by, stamped, within), (Some(rev.clone()), true, true));
    let (_, shown, _) = cli(&db.url, &["show", "ns1", "bot"]);
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["completed"], true);
    assert_eq!(shown["completedRevisionId"], rev.as_str());
    assert!(shown["completedAt"].is_string());
    // No audit of its own: the activation's stands.
    assert!(audits(&mut c, "openclaw.agents.workspace_setup.complete").is_empty());
}

#[test]
fn ws4_an_already_active_pass_completes_a_later_put() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    let driver = Arc::new(ScriptedDriver {
        workspace_setup: true,
        maintenance: Some(Duration::from_millis(300)),
        ..ScriptedDriver::default()
    });
    let rev = deploy(&mut c, &agent);
    run_until(&db, driver.clone(), |c| {
        work(c, &rkey(&rev)).0 == "succeeded"
    });
    let id = put(&mut c, &agent, json!({"b": 2}));
    run_until(&db, driver.clone(), |c| {
        setup(c, &agent) == Some((id.clone(), Some(rev.clone())))
    });
    let completed_by: Option<String> = c
        .query_one(
            "SELECT reason_code FROM occ.work_status WHERE idempotency_key LIKE $1
               AND state = 'succeeded' ORDER BY updated_at DESC LIMIT 1",
            &[&format!("agent_revision:{rev}:maintenance:%")],
        )
        .unwrap()
        .get(0);
    assert_eq!(completed_by.as_deref(), Some("REVISION_ALREADY_ACTIVE"));
}

#[test]
fn ws4_a_lost_race_or_a_failure_completes_nothing() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    let driver = Arc::new(ScriptedDriver {
        workspace_setup: true,
        ..ScriptedDriver::default()
    });
    let id = put(&mut c, &agent, json!({"a": 1}));
    // A failed deployment completes nothing.
    let rev = deploy(&mut c, &agent);
    driver.script_prepare(
        &rev,
        vec![Prepare::Fail(occ_worker::compute::ComputeError::permanent(
            "HARNESS_IMAGE_UNAVAILABLE",
            "scripted",
            None,
        ))],
    );
    run_until(&db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("HARNESS_IMAGE_UNAVAILABLE");
    assert_eq!(setup(&mut c, &agent), Some((id.clone(), None)));
    // A stop completes nothing either.
    let rev = deploy(&mut c, &agent);
    run_until(&db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).completed_with("REVISION_ACTIVATED");
    let id = put(&mut c, &agent, json!({"a": 2}));
    c.query_one("SELECT occ.agent_stop('ns1', $1, 'admin')", &[&agent])
        .unwrap();
    run_until(&db, driver.clone(), quiet);
    assert_eq!(setup(&mut c, &agent), Some((id.clone(), None)));
    // The completion of a revision the Agent no longer points at (a lost race) writes nothing.
    let completed = c
        .query_opt(
            include_str!("../../sql/queries/workspace_setup_complete.sql"),
            &[&"ns1", &agent, &rev],
        )
        .unwrap();
    assert!(completed.is_none());
    assert_eq!(setup(&mut c, &agent), Some((id, None)));
}

// ---------------------------------------------------------------------------------------------
// WS5: the workspace codes
// ---------------------------------------------------------------------------------------------

#[test]
fn ws5_a_refused_setup_fails_at_once_and_keeps_the_runtime() {
    let w = setup_world(false);
    let name = format!("agent-{}-r1", w.agent);
    w.kube
        .fake
        .set_deployment_behaviour(NS1, &name, PodBehaviour::SetupRefused);
    let mut c = w.db.client();
    let id = put(&mut c, &w.agent, json!({"a": 1}));
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("WORKSPACE_SETUP_REFUSED");
    assert_eq!(crate::agent::active(&mut c, &w.agent), None);
    // Kept for diagnosis: never scaled down or deleted; the setup stays incomplete.
    assert_eq!(deployment(&w, &name).unwrap()["spec"]["replicas"], 1);
    let touched: Vec<String> = w
        .kube
        .writes()
        .iter()
        .filter(|r| r.path.contains(&name) && r.method != "POST")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(touched.is_empty(), "{touched:?}");
    assert_eq!(setup(&mut c, &w.agent), Some((id, None)));
}

#[test]
fn ws5_a_restarting_setup_waits_retrying() {
    let w = setup_world(false);
    w.kube.fake.set_deployment_behaviour(
        NS1,
        &format!("agent-{}-r1", w.agent),
        PodBehaviour::SetupFailing,
    );
    let mut c = w.db.client();
    put(&mut c, &w.agent, json!({"a": 1}));
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    run_until(&w.db, w.kube.driver.clone(), |c| {
        evidence(c, &rkey(&rev)).contains(&"deferred:WORKSPACE_SETUP_RETRYING".to_string())
    });
    let (state, code, _, attempts) = work(&mut c, &rkey(&rev));
    assert_eq!((state.as_str(), code, attempts), ("queued", None, 0));
}

#[test]
fn ws5_an_unbound_claim_waits_node_pending() {
    let settings = SETTINGS.replace(
        r#""qps": 1000,"#,
        &format!(
            r#""harnessClaim": {{"storageClassName": "{}"}}, "qps": 1000,"#,
            crate::kube_fake::UNBOUND_STORAGE_CLASS
        ),
    );
    let w = agent_world_with(FakeOptions::default(), &settings);
    let mut c = w.db.client();
    let rev = deploy_kube(&mut c, &w.agent, "codex", "dedicated", "admin");
    let opts = Opts {
        convergence: Duration::from_secs(3),
        ..Opts::default()
    };
    run_with(&w.db, w.kube.driver.clone(), opts, quiet);
    crate::support::expect_work(&mut c, &rkey(&rev)).failed_with("CONVERGENCE_DEADLINE_EXCEEDED");
    let seen = evidence(&mut c, &rkey(&rev));
    assert!(
        seen.iter().any(|e| e == "deferred:WORKSPACE_NODE_PENDING"),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|e| e == "deferred:REVISION_UNSCHEDULABLE"),
        "{seen:?}"
    );
    let claims = agent_objects(&w, "persistentvolumeclaims");
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0]["status"]["phase"], "Pending");
}

#[test]
fn ws5_binding_and_reconnect_codes_are_readiness_evidence() {
    use crate::scripted::Prepare;
    for code in [
        "WORKSPACE_NODE_BINDING_PENDING",
        "WORKSPACE_NODE_RECONNECT_PENDING",
    ] {
        let Fixture { db, agent, .. } = fixture();
        let mut c = db.client();
        let rev = deploy(&mut c, &agent);
        let driver = Arc::new(ScriptedDriver::new());
        driver.script_prepare(&rev, vec![Prepare::Pending(code)]);
        run_until(&db, driver.clone(), |c| {
            evidence(c, &rkey(&rev)).contains(&format!("deferred:{code}"))
        });
        // A readiness wait: deferred with its own code, the attempt refunded (the unit test
        // `readiness_codes_name_every_workspace_wait` keeps it readiness evidence for Z3).
        let (state, _, _, attempts) = work(&mut c, &rkey(&rev));
        assert!(state == "queued" || state == "succeeded", "{code}: {state}");
        assert_eq!(attempts, 0, "{code}");
    }
}

// ---------------------------------------------------------------------------------------------
// docs/kubernetes.md's workspace-setup step, as written, against the TLS fake
// ---------------------------------------------------------------------------------------------

/// The `sh` block of docs/kubernetes.md, marked to run against the Kubernetes API fake, that
/// contains `text`.
pub fn guide_block(text: &str) -> String {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kubernetes.md"),
    )
    .unwrap();
    let mut found = crate::readme::blocks(&guide)
        .into_iter()
        .filter(|(_, marker, block)| {
            *marker == crate::readme::Marker::Fake && block.contains(text)
        });
    let block = found
        .next()
        .unwrap_or_else(|| panic!("docs/kubernetes.md runs a block with {text}"));
    assert!(
        found.next().is_none(),
        "one block of docs/kubernetes.md has {text}"
    );
    block.2
}

// The guide's step after the kind recipe: with the recipe's state (the ready Namespace team-a,
// its Configuration cfg and Secret key, the Agent helper with its grant) and a worker running
// the guide's driver file, the block runs as written and the setup completes by the revision
// it deployed, through the init container the fake's kubelet ran.
#[test]
fn ws3_the_kubernetes_guide_step_runs_against_the_fake() {
    use crate::kube_e2e::{k8s_namespace, kube_env, scratch};
    use crate::kube_fake::KubeFake;
    use crate::support::{wait_for, worker_command, TestDb, WorkerProcess};
    let block = guide_block("workspace-setup put");
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(50),
        ..FakeOptions::default()
    });
    let dir = scratch("ws-guide");
    std::fs::create_dir_all(dir.join("target")).unwrap();
    let db = TestDb::bootstrapped();
    let env = kube_env(&db, &fake, &dir, 2);
    let _worker = WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap());
    let mut c = db.client();
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
    let (agent, _) = crate::agent::create_agent(&mut c, &ns, "helper");
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg(format!(
            "set -euo pipefail\nocc={}\n{block}",
            env!("CARGO_BIN_EXE_occ-worker")
        ))
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let out = crate::support::logged("guide", cmd.output().expect("bash"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let revision: String = c
        .query_one(
            "SELECT active_revision_id FROM occ.agents WHERE id = $1",
            &[&agent],
        )
        .unwrap()
        .get(0);
    let (id, by): (String, Option<String>) = {
        let r = c
            .query_one(
                "SELECT id, completed_revision_id FROM occ.workspace_setups WHERE agent_id = $1",
                &[&agent],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(by.as_deref(), Some(revision.as_str()));
    assert!(stdout.contains(&id), "the show names the setup: {stdout}");
    let harness = fake
        .get(&format!(
            "{}/namespaces/{k8s}/deployments/agent-{agent}-r1",
            crate::kubernetes::APPS
        ))
        .expect("the Harness Deployment");
    let init = &harness["spec"]["template"]["spec"]["initContainers"][0];
    assert_eq!(init["name"], "workspace-setup");
    assert_eq!(init["image"], "registry.test/setup:1.0.0");
}
