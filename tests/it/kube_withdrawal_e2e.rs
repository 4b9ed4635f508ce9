//! Withdrawing a leaked key, end to end on Kubernetes (SPEC §13): two `occ-worker run`
//! processes with the Kubernetes Compute Driver and the built-in Credential Gateway against the
//! API server fake over TLS, driven through the operator CLI as an operator would.
//!
//! An Agent is deployed with a model source and two tool sources, attached as `secretKeyRef`s.
//! A tool source is withdrawn while the Agent serves: the first request's operator loses the
//! grant before the work runs (denied, awaiting replay), a second operator replays it, the
//! Pods roll, the Agent stays active and no Pod refers to the Secret any more, also after
//! another pass of the revision, which detaches it again before it prepares. The harness
//! source is then withdrawn: refused while its runtime runs, until a new revision activates
//! without it and the retired revision's attempt revokes it.

use crate::agent::create_agent;
use crate::kube_e2e::{k8s_namespace, kube_env, ready_namespaces, scratch};
use crate::kube_fake::{FakeOptions, KubeFake};
use crate::support::{wait_for, worker_command, Env, TestDb, WorkerProcess};
use postgres::Client;
use serde_json::{json, Value};
use std::time::Duration;

const GATEWAY: &str = "gateway-1";

/// `occ-worker --json admin …` with `env`; its JSON answer.
fn admin(env: &Env, args: &[&str]) -> Value {
    crate::support::json_ok(
        &mut worker_command(&[&["--json", "admin"], args].concat(), env),
        &format!("occ-worker admin {args:?}"),
    )
}

/// `admin agent deploy` of the Agent `helper` (dedicated Codex) with the harness source
/// `model` and the tool sources `tools`; the revision id.
fn deploy(env: &Env, ns: &str, model: &str, tools: &[&str]) -> String {
    let more = [
        "--credential-source",
        model,
        "--compute-id",
        "kubernetes",
        "--actor",
        "admin",
    ];
    // `admin` is prepended by `admin` itself.
    let mut args = crate::support::deploy_args(ns, "helper", "cfg", &more).split_off(1);
    for tool in tools {
        args.extend(["--tool-source", tool]);
    }
    admin(env, &args)["revisionId"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The environment variables of every container of a Pod template or Pod spec that read a
/// Secret, as `NAME=secret/key`.
fn secret_env(spec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        for e in c["env"].as_array().into_iter().flatten() {
            if let Some(r) = e["valueFrom"].get("secretKeyRef") {
                out.push(format!(
                    "{}={}/{}",
                    e["name"].as_str().unwrap_or(""),
                    r["name"].as_str().unwrap_or(""),
                    r["key"].as_str().unwrap_or("")
                ));
            }
        }
    }
    out.sort();
    out
}

/// Whether `o` is a harness object of revision `rev` in namespace `ns`.
fn harness_of(o: &Value, ns: &str, rev: &str) -> bool {
    let labels = &o["metadata"]["labels"];
    o["metadata"]["namespace"] == ns
        && labels["occ.revision"] == rev
        && labels["occ.component"] == "harness"
}

/// The Secret references of the revision's harness Deployment template and of each of its
/// Pods.
fn references(fake: &KubeFake, ns: &str, rev: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let deployment = fake
        .objects("deployments")
        .into_iter()
        .find(|d| harness_of(d, ns, rev))
        .map(|d| secret_env(&d["spec"]["template"]["spec"]))
        .unwrap_or_default();
    let pods = fake
        .objects("pods")
        .into_iter()
        .filter(|p| harness_of(p, ns, rev))
        .map(|p| secret_env(&p["spec"]))
        .collect();
    (deployment, pods)
}

use crate::support::work_state;

fn wait_ended(c: &mut Client, key: &str) -> (String, Option<String>) {
    let mut last = (String::new(), None);
    wait_for(key, Duration::from_secs(120), || {
        last = work_state(c, key);
        matches!(last.0.as_str(), "succeeded" | "failed_permanent")
    });
    last
}

fn grant(c: &mut Client, principal: &str, ns: &str, kind: &str, id: &str) {
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ($1, 'agent-operator', 'resource', $2, $3, $4)",
        &[&principal, &ns, &kind, &id],
    )
    .unwrap();
}

fn operator(c: &mut Client, id: &str, ns: &str, agent: &str) {
    c.execute(
        "INSERT INTO occ.identities (id, kind) VALUES ($1, 'user')",
        &[&id],
    )
    .unwrap();
    grant(c, id, ns, "agent", agent);
}

/// An Agent `helper` serving on two worker processes behind the Kubernetes fake, with the
/// model sources `model` and `model-2` and the tool sources `search` and `mail` granted.
struct Serving {
    _workers: Vec<WorkerProcess>,
    db: TestDb,
    fake: KubeFake,
    env: Env,
    ns: String,
    k8s: String,
    agent: String,
}

fn serving_agent() -> Serving {
    let fake = KubeFake::start(FakeOptions {
        pod_start: Duration::from_millis(20),
        pod_termination: Duration::from_millis(50),
        terminating_for: Duration::from_millis(200),
        ..FakeOptions::default()
    });
    let dir = scratch("kube-withdrawal");
    let db = TestDb::bootstrapped();
    let installation = dir.join("installation.json");
    std::fs::write(
        &installation,
        json!({
            "sandbox": {"id": "sandbox-1", "implementation": "kubernetes-sandbox",
                        "facets": ["read-only-root"]},
            "credentialGateway": {"id": GATEWAY, "implementation": "kubernetes-secret-gateway"},
        })
        .to_string(),
    )
    .unwrap();
    let mut env = kube_env(&db, &fake, &dir, 2);
    env.push((
        "OCC_INSTALLATION_CONFIG",
        installation.display().to_string(),
    ));
    let _workers: Vec<WorkerProcess> = (0..2)
        .map(|_| WorkerProcess::capture(worker_command(&["run"], &env).spawn().unwrap()))
        .collect();
    let mut c = db.client();
    let ns = ready_namespaces(&mut c, &fake, 1).remove(0);
    let k8s = k8s_namespace(&ns);
    let (agent, principal) = create_agent(&mut c, &ns, "helper");
    for (id, kind) in [
        ("model", "model_key"),
        ("model-2", "model_key"),
        ("search", "tool"),
        ("mail", "tool"),
    ] {
        let backend = format!("{k8s}/{id}-secret/token");
        admin(
            &env,
            &[
                "credential-source",
                "create",
                &ns,
                id,
                "--kind",
                kind,
                "--backend-ref",
                &backend,
                "--actor",
                "admin",
            ],
        );
        grant(&mut c, &principal, &ns, "credential_source", id);
    }
    Serving {
        _workers,
        db,
        fake,
        env,
        ns,
        k8s,
        agent,
    }
}

/// Asserts the workload of `rev` and each of its Pods (at least one) refer to `expected`.
fn assert_refers(w: &Serving, rev: &str, expected: &[&str]) {
    let expected: Vec<String> = expected.iter().map(|e| e.to_string()).collect();
    let (template, pods) = references(&w.fake, &w.k8s, rev);
    assert_eq!(template, expected);
    assert!(
        !pods.is_empty() && pods.iter().all(|p| *p == expected),
        "{pods:?}"
    );
}

/// `agent withdraw-credential` of `source` from `helper` as `actor`: the work's key.
fn withdraw(w: &Serving, source: &str, actor: &str) -> String {
    let args = [
        "agent",
        "withdraw-credential",
        &w.ns,
        "helper",
        source,
        "--actor",
        actor,
    ];
    admin(&w.env, &args)["works"][0]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn e_a_leaked_key_is_withdrawn_from_a_serving_agent_on_two_worker_processes() {
    let w = serving_agent();
    let (env, ns, agent) = (&w.env, w.ns.as_str(), w.agent.as_str());
    let mut c = w.db.client();

    // Deployed with a model source and two tool sources, attached by reference.
    let first = deploy(env, ns, "model", &["search", "mail"]);
    let reconcile = format!("agent_revision:{first}:reconcile");
    assert_eq!(
        wait_ended(&mut c, &reconcile),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    let all = [
        "OCC_CREDENTIAL_MAIL=mail-secret/token",
        "OCC_CREDENTIAL_SEARCH=search-secret/token",
        "OCC_HARNESS_API_KEY=model-secret/token",
    ];
    assert_refers(&w, &first, &all);

    // The first request's operator loses the grant before the work runs: denied for that
    // requester, awaiting replay.
    operator(&mut c, "op-1", ns, agent);
    operator(&mut c, "op-2", ns, agent);
    let mut tx = c.transaction().unwrap();
    let requested: Value = crate::support::one(
        &mut tx,
        "SELECT occ.credential_withdrawal_request('op-1', $1, $2, 'search')",
        &[&ns, &agent],
    );
    tx.execute(
        "DELETE FROM occ.iam_bindings WHERE principal_id = 'op-1'",
        &[],
    )
    .unwrap();
    tx.commit().unwrap();
    let denied_key = requested["works"][0].as_str().unwrap().to_string();
    assert_eq!(
        wait_ended(&mut c, &denied_key),
        (
            "failed_permanent".into(),
            Some("AUTHORIZATION_DENIED".into())
        )
    );
    let shown = admin(env, &["work", "show", &denied_key]);
    assert_eq!(shown["hintCode"], "GRANT_AND_REPLAY", "{shown}");

    // A second operator replays it: the Pods roll and none refers to the Secret any more, the
    // Agent staying active throughout.
    let replay_key = withdraw(&w, "search", "op-2");
    assert_eq!(
        wait_ended(&mut c, &replay_key),
        ("succeeded".into(), Some("CREDENTIALS_WITHDRAWN".into()))
    );
    let kept = [
        "OCC_CREDENTIAL_MAIL=mail-secret/token",
        "OCC_HARNESS_API_KEY=model-secret/token",
    ];
    assert_refers(&w, &first, &kept);
    let active: Option<String> = crate::support::one(
        &mut c,
        "SELECT active_revision_id FROM occ.agents WHERE id = $1",
        &[&agent],
    );
    assert_eq!(active.as_deref(), Some(first.as_str()));
    let listed = admin(env, &["withdrawal", "list", ns, "helper"]);
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sourceId"] == "search")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(
        (&row["state"], &row["requestedBy"]),
        (&json!("revoked"), &json!("op-2"))
    );
    let requesters: Vec<(String, String)> = c
        .query(
            "SELECT actor_id, outcome FROM occ.audit_events
             WHERE action = 'openclaw.agents.lifecycle.credentials_withdraw' ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(
        requesters.contains(&("op-1".into(), "denied".into())),
        "{requesters:?}"
    );
    assert!(
        requesters.contains(&("op-2".into(), "success".into())),
        "{requesters:?}"
    );

    // Another pass of the revision detaches the revoked source again before it prepares
    // (SPEC E17): the workload it writes still leaves the Secret out.
    c.execute(
        "UPDATE occ.work SET state = 'queued', reason_code = NULL, result_data = NULL,
             completed_at = NULL, available_at = now() WHERE idempotency_key = $1",
        &[&reconcile],
    )
    .unwrap();
    assert_eq!(
        wait_ended(&mut c, &reconcile),
        ("succeeded".into(), Some("REVISION_ALREADY_ACTIVE".into()))
    );
    assert_refers(&w, &first, &kept);

    // The harness source: refused while its runtime runs ...
    let harness_key = withdraw(&w, "model", "op-2");
    assert_eq!(
        wait_ended(&mut c, &harness_key),
        (
            "failed_permanent".into(),
            Some("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT".into())
        )
    );
    assert_eq!(
        admin(env, &["work", "show", &harness_key])["hintCode"],
        "DEPLOY_NEW_REVISION"
    );
    // ... until a new revision activates without it; the retired revision's attempt revokes it.
    let second = deploy(env, ns, "model-2", &["mail"]);
    assert_eq!(
        wait_ended(&mut c, &format!("agent_revision:{second}:reconcile")),
        ("succeeded".into(), Some("REVISION_ACTIVATED".into()))
    );
    let retirement = format!("agent_revision:{first}:credential_withdrawal:retirement");
    assert_eq!(
        wait_ended(&mut c, &retirement),
        ("succeeded".into(), Some("CREDENTIALS_WITHDRAWN".into()))
    );
    let state: String = crate::support::one(
        &mut c,
        "SELECT state FROM occ.credential_withdrawals WHERE revision_id = $1 AND source_id = 'model'",
        &[&first],
    );
    assert_eq!(state, "revoked");
    let (template, pods) = references(&w.fake, &w.k8s, &second);
    let now = vec![
        "OCC_CREDENTIAL_MAIL=mail-secret/token".to_string(),
        "OCC_HARNESS_API_KEY=model-2-secret/token".to_string(),
    ];
    assert_eq!(template, now);
    assert!(pods.iter().all(|p| *p == now), "{pods:?}");
}
