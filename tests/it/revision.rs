//! AgentRevision deployment (SPEC R2-R12) with a real worker and the scripted driver: one test
//! per reachable reason code, the races of R4/R6, and a concurrency run.

use crate::agent::{
    active, audits, create_agent, deploy, evidence, fixture, stop, user, work, Fixture,
};
use crate::scripted::{
    quiet, run_for, run_on, run_until, run_with, LaneRecorder, Opts, Prepare, ScriptedDriver,
};
use crate::support::{insert_namespace, scalar, wait_for, TestDb, WorkerProcess};
use occ_worker::compute::ComputeError;
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

pub(crate) fn key(rev: &str) -> String {
    format!("agent_revision:{rev}:reconcile")
}

fn status(c: &mut Client, rev: &str) -> (String, Option<String>, Value) {
    crate::support::row3(
        c,
        "SELECT state, error, warnings FROM occ.revision_status WHERE revision_id = $1",
        &[&rev],
    )
}

pub(crate) fn run(f: &Fixture, driver: &Arc<ScriptedDriver>) {
    run_until(&f.db, driver.clone(), quiet);
}

/// Runs one deployment that must fail with `code` before any Compute call (R2).
fn assert_refused(f: &Fixture, rev: &str, code: &str) {
    let driver = Arc::new(ScriptedDriver::new());
    run(f, &driver);
    let mut c = f.db.client();
    let (state, got, _, _) = work(&mut c, &key(rev));
    assert_eq!(
        (state.as_str(), got.as_deref()),
        ("failed_permanent", Some(code))
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    assert_eq!(active(&mut c, &f.agent), None);
    assert_eq!(status(&mut c, rev).1.as_deref(), Some(code));
    // Changed: only a denial is audited, on the Agent; other refusals write no failure
    // mutation (seed 004 5916-5922, 6798-6823).
    let a = audits(&mut c, "openclaw.agents.deploy");
    if code == "AUTHORIZATION_DENIED" || code == "ACTOR_REVOKED" {
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].0.as_str(), a[0].3.as_str()),
            ("authorization_denial", f.agent.as_str())
        );
    } else {
        assert!(a.is_empty(), "{a:?}");
    }
}

/// Inserts a revision directly (admission only ever writes secret auth) and its work.
fn insert_revision(c: &mut Client, agent: &str, auth: Value) -> String {
    c.execute(
        "INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id, service_principal_id,
           configuration_id, configuration_generation, document, harness_id, harness_version, harness_mode,
           execution_mode, compute_id, compute_implementation, harness_auth)
         SELECT 'rx', 'ns1', id, 1, 'admin', service_principal_id, 'cfg', 1, '{}', 'codex', '1.0.0',
           'dedicated', 'dedicated', 'scripted', 'scripted', $2 FROM occ.agents WHERE id = $1",
        &[&agent, &auth],
    )
    .unwrap();
    c.execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
         VALUES ('agent_revision:rx:reconcile', 'ns1', $1, 'rx', 'admin')",
        &[&agent],
    )
    .unwrap();
    "rx".into()
}

#[test]
fn r6_a_ready_revision_activates_with_one_audit_and_reports_warnings() {
    let f = fixture();
    let mut c = f.db.client();
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'openclaw', 'embedded', 'key', 'scripted', 'scripted', '{}', '[{\"id\": \"web\"}]')",
        &[&f.agent],
    );
    let rev = v["revisionId"].as_str().unwrap().to_string();
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        vec![Prepare::ReadyWithWarning("PLUGIN_INSTALL_FAILED", "web")],
    );
    run(&f, &driver);
    let (state, code, data, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("succeeded", Some("REVISION_ACTIVATED"))
    );
    let warnings = json!([{"code": "PLUGIN_INSTALL_FAILED", "pluginId": "web"}]);
    assert_eq!(data, Some(json!({ "warnings": warnings })));
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    assert_eq!(
        driver.calls(),
        vec![
            // The Agent's objects before preparation (seed 004 4498-4510); an embedded
            // revision needs no deactivation before its first pointer commit.
            ("bind_agent".to_string(), f.agent.clone()),
            ("prepare_revision".to_string(), rev.clone()),
            ("activate_revision".to_string(), rev.clone())
        ]
    );
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.activate").len(),
        1
    );
    assert_eq!(status(&mut c, &rev), ("active".to_string(), None, warnings));
}

#[test]
fn r6_a_newer_revision_retires_its_predecessor() {
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    let r2 = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    assert_eq!(active(&mut c, &f.agent), Some(r2.clone()));
    assert!(driver
        .calls()
        .contains(&("retire_revision".to_string(), r1.clone())));
    assert_eq!(status(&mut c, &r1).0, "superseded");
    assert_eq!(status(&mut c, &r2).0, "active");
    let retired: bool = crate::support::one(
        &mut c,
        "SELECT retired_at IS NOT NULL FROM occ.agent_revisions WHERE id = $1",
        &[&r1],
    );
    assert!(retired);
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.activate").len(),
        2
    );
}

#[test]
fn r2_namespace_not_ready() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    c.execute("UPDATE occ.namespaces_all SET status = 'failed'", &[])
        .unwrap();
    assert_refused(&f, &rev, "NAMESPACE_NOT_READY");
}

#[test]
fn r2_harness_descriptor_mismatch() {
    // Changed: admission now refuses a version the catalog does not approve, so the worker's
    // mismatch comes from a catalog change after admission (seed 004 4234-4241). The approved
    // version is exact: `1.0.0` no longer passes once `1.0.1` is approved (no `1.` prefix).
    let f = fixture();
    let mut c = f.db.client();
    for version in ["9.0.0", "1.0.5"] {
        let e = c
            .query_one(
                "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'scripted', 'scripted', '{}', '[]', $2)",
                &[&f.agent, &version],
            )
            .unwrap_err();
        assert!(
            e.as_db_error()
                .unwrap()
                .message()
                .contains("not the approved version 1.0.0"),
            "{e}"
        );
    }
    let rev = deploy(&mut c, &f.agent);
    let approved = crate::agent::cli(
        &f.db,
        &[
            "admin",
            "harness",
            "approve",
            "codex",
            "--mode",
            "dedicated",
            "--version",
            "1.0.1",
            "--actor",
            "admin",
        ],
    );
    assert_eq!(approved["previousVersion"], "1.0.0");
    let listed = crate::agent::cli(&f.db, &["admin", "harness", "list"]);
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["id"] == "codex" && h["mode"] == "dedicated" && h["version"] == "1.0.1"));
    assert_eq!(
        audits(&mut c, "openclaw.harnesses.approve").len(),
        1,
        "the approval is audited"
    );
    assert_refused(&f, &rev, "HARNESS_DESCRIPTOR_MISMATCH");
    // A revision admitted under the newly approved version deploys.
    let rev = deploy(&mut c, &f.agent);
    run(&f, &Arc::new(ScriptedDriver::new()));
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn r2_only_installation_administrators_approve_harness_versions() {
    let f = fixture();
    let mut c = f.db.client();
    user(&mut c, "bob", "namespace-admin");
    let e = c
        .query_one(
            "SELECT occ.harness_approve('bob', 'codex', 'dedicated', '2.0.0')",
            &[],
        )
        .unwrap_err();
    assert!(
        e.as_db_error()
            .unwrap()
            .message()
            .contains("may not approve Harness versions"),
        "{e}"
    );
    let version: String = scalar(
        &mut c,
        "SELECT version FROM occ.approved_harnesses WHERE harness_id = 'codex' AND mode = 'dedicated'",
    );
    assert_eq!(version, "1.0.0");
}

#[test]
fn r2_compute_driver_mismatch() {
    let f = fixture();
    let mut c = f.db.client();
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'kube-1', 'kubernetes')",
        &[&f.agent],
    );
    assert_refused(
        &f,
        v["revisionId"].as_str().unwrap(),
        "COMPUTE_DRIVER_MISMATCH",
    );
}

#[test]
fn r2_invalid_admitted_revision() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    c.batch_execute("SET session_replication_role = replica")
        .unwrap();
    c.execute(
        "UPDATE occ.agent_revisions SET service_principal_id = 'sp-someone' WHERE id = $1",
        &[&rev],
    )
    .unwrap();
    c.batch_execute("SET session_replication_role = origin")
        .unwrap();
    assert_refused(&f, &rev, "INVALID_ADMITTED_REVISION");
}

#[test]
fn r2_actor_revoked() {
    let f = fixture();
    let mut c = f.db.client();
    user(&mut c, "bob", "namespace-admin");
    let rev = crate::agent::deploy_as(&mut c, &f.agent, "bob");
    c.execute("DELETE FROM occ.identities WHERE id = 'bob'", &[])
        .unwrap();
    assert_refused(&f, &rev, "ACTOR_REVOKED");
}

#[test]
fn r2_a_revoked_service_principal_is_invalid_agent_principal() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    c.execute(
        "INSERT INTO occ.api_keys (id, service_principal_id, key_hash) VALUES ('k1', $1, repeat('a', 64))",
        &[&f.principal],
    )
    .unwrap();
    // Removing an identity revokes it (SPEC §1), a service principal included.
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.identity_revoke('admin', $1)",
        &[&f.principal],
    );
    assert_eq!(v["revoked"], json!(true));
    assert_eq!(v["removed"]["apiKeyIds"], json!(["k1"]));
    let keys: i64 = scalar(&mut c, "SELECT count(*) FROM occ.api_keys");
    assert_eq!(keys, 0, "the principal's API keys go with it");
    let kept: String = crate::support::one(
        &mut c,
        "SELECT service_principal_id FROM occ.agents WHERE id = $1",
        &[&f.agent],
    );
    assert_eq!(kept, f.principal, "the Agent keeps its principal id");
    assert_eq!(audits(&mut c, "openclaw.identities.revoke").len(), 1);
    assert_refused(&f, &rev, "INVALID_AGENT_PRINCIPAL");
}

#[test]
fn r2_authorization_denied_for_deploy_read_and_secret_operate() {
    for (principal, action, kind, id) in [
        ("admin", "deploy", "agent", None),
        ("admin", "read", "configuration", Some("cfg")),
        ("admin", "operate", "secret", Some("key")),
        ("principal", "operate", "secret", Some("key")),
    ] {
        let f = fixture();
        let mut c = f.db.client();
        let rev = deploy(&mut c, &f.agent);
        let principal = if principal == "principal" {
            f.principal.clone()
        } else {
            principal.to_string()
        };
        let id = id.map(String::from).unwrap_or(f.agent.clone());
        c.execute(
            "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
             VALUES ($1, ARRAY[$2], 'resource', 'ns1', $3, $4)",
            &[&principal, &action, &kind, &id],
        )
        .unwrap();
        assert_refused(&f, &rev, "AUTHORIZATION_DENIED");
    }
}

#[test]
fn r2_harness_auth_required_and_invalid() {
    let f = fixture();
    let mut c = f.db.client();
    c.execute(
        "INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id, service_principal_id,
           configuration_id, configuration_generation, document, harness_id, harness_version, harness_mode,
           execution_mode, compute_id, compute_implementation, harness_auth)
         SELECT 'rx', 'ns1', id, 1, 'admin', service_principal_id, 'cfg', 1, '{}', 'codex', '1.0.0',
           'dedicated', 'dedicated', 'scripted', 'scripted', NULL FROM occ.agents WHERE id = $1",
        &[&f.agent],
    )
    .unwrap();
    c.execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
         VALUES ('agent_revision:rx:reconcile', 'ns1', $1, 'rx', 'admin')",
        &[&f.agent],
    )
    .unwrap();
    assert_refused(&f, "rx", "HARNESS_AUTH_REQUIRED");

    let f = fixture();
    let mut c = f.db.client();
    insert_namespace(&mut c, "ns2", "ready");
    let rev = insert_revision(
        &mut c,
        &f.agent,
        json!({"method": "secret", "source": {"namespaceId": "ns2", "id": "key"}}),
    );
    assert_refused(&f, &rev, "INVALID_HARNESS_AUTH");
}

#[test]
fn r2_a_missing_bound_secret_is_unavailable() {
    // Seed 004 5300-5319: a binding whose Secret cannot be resolved is
    // SECRET_BINDING_UNAVAILABLE (it was INVALID_SECRET_BINDINGS before). Authorization
    // comes first, so the service principal may operate the (missing) Secret.
    let f = fixture();
    let mut c = f.db.client();
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ($1, 'agent-operator', 'resource', 'ns1', 'secret', 'missing')",
        &[&f.principal],
    )
    .unwrap();
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'scripted', 'scripted',
               '{\"TOKEN\": {\"namespaceId\": \"ns1\", \"id\": \"missing\"}}')",
        &[&f.agent],
    );
    assert_refused(
        &f,
        v["revisionId"].as_str().unwrap(),
        "SECRET_BINDING_UNAVAILABLE",
    );
}

#[test]
fn r2_a_missing_harness_secret_is_unavailable() {
    // Seed 004 5323-5342: the `secret` harness auth's Secret is gone after admission.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    c.execute(
        "DELETE FROM occ.secrets WHERE namespace_id = 'ns1' AND id = 'key'",
        &[],
    )
    .unwrap();
    assert_refused(&f, &rev, "HARNESS_AUTH_SOURCE_UNAVAILABLE");
}

// The managed-account checks of R2 (SPEC M2) are in `managed.rs`.

#[test]
fn r3_a_stopped_agent_stops_the_revision() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let stop_key = stop(&mut c, &f.agent, "admin");
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_STOPPED")
    );
    // The revision's own work stops it; the Agent stop then stops the candidate admitted
    // before it again (idempotent), with nothing active.
    assert_eq!(
        driver.calls_of("stop_revision"),
        vec![rev.clone(), rev.clone()]
    );
    assert!(driver.calls_of("prepare_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), None);
    assert_eq!(status(&mut c, &rev).0, "stopped");
    assert_eq!(
        work(&mut c, &stop_key).1.as_deref(),
        Some("AGENT_ALREADY_STOPPED")
    );
}

#[test]
fn r4_back_to_back_revisions_the_older_never_replaces_the_newer() {
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    let r2 = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&r1, vec![Prepare::Pending("WORKLOAD_UNSCHEDULABLE")]);
    run(&f, &driver);
    assert_eq!(active(&mut c, &f.agent), Some(r2.clone()));
    assert_eq!(
        work(&mut c, &key(&r1)).1.as_deref(),
        Some("REVISION_SUPERSEDED")
    );
    assert_eq!(
        driver.calls_of("prepare_revision"),
        vec![r1.clone(), r2.clone()]
    );
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.supersede").len(),
        1
    );
    assert_eq!(status(&mut c, &r1).0, "superseded");
}

#[test]
fn r5_pending_defers_with_its_code_and_refunds_the_attempt() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Pending("WORKLOAD_IMAGE_PULL_FAILED")]);
    run(&f, &driver);
    let (_, code, _, attempts) = work(&mut c, &key(&rev));
    assert_eq!(code.as_deref(), Some("REVISION_ACTIVATED"));
    assert_eq!(attempts, 1, "deferral refunds the attempt");
    assert_eq!(
        evidence(&mut c, &key(&rev)),
        vec![
            "deferred:REVISION_IMAGE_PULL_FAILED",
            "succeeded:REVISION_ACTIVATED"
        ]
    );
}

#[test]
fn r5_a_held_runtime_failure_ends_at_once_and_keeps_the_runtime() {
    // Seed 004 5832-5846: a runtime that failed by itself is not stopped, so operators can
    // read its logs; the driver's code maps through HELD_RUNTIME_FAILURE_CODES (1071-1081).
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::RuntimeFailure("AUTHENTICATION_FAILED")]);
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("RUNTIME_AUTHENTICATION_FAILED");
    assert!(driver.calls_of("stop_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), None);
    assert_eq!(status(&mut c, &rev).0, "failed");
}

#[test]
fn r5_pending_past_the_deadline_fails_with_timeout_and_runtime_failure() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        (0..20)
            .map(|_| Prepare::RuntimeFailure("CRASH_LOOP"))
            .collect(),
    );
    let opts = Opts {
        convergence: Duration::from_millis(300),
        ..Opts::default()
    };
    run_with(&f.db, driver.clone(), opts, quiet);
    let (state, code, data, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("CONVERGENCE_DEADLINE_EXCEEDED"))
    );
    assert_eq!(
        data,
        // Runtime-failure evidence is a structured object (seed 004 1054-1060).
        Some(json!({"timeoutMs": 300, "runtimeFailure": {"code": "CRASH_LOOP"}}))
    );
}

#[test]
fn r5_r9_an_invalid_observation_stops_the_candidate_before_failing() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Mismatched]);
    driver.fail(
        "stop_revision",
        &rev,
        ComputeError::retryable("scripted", Some(500)),
    );
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("INVALID_DRIVER_OBSERVATION");
    assert_eq!(
        driver.calls_of("stop_revision"),
        vec![rev.clone(), rev.clone()]
    );
    assert_eq!(
        evidence(&mut c, &key(&rev)),
        vec![
            "deferred:REFUSED_CANDIDATE_STOP_PENDING",
            "failed:INVALID_DRIVER_OBSERVATION"
        ]
    );
    let refusal: Option<String> = crate::support::one(
        &mut c,
        "SELECT refusal FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
             WHERE w.idempotency_key = $1 AND a.outcome = 'failed'",
        &[&key(&rev)],
    );
    assert_eq!(refusal.as_deref(), Some("INVALID_DRIVER_OBSERVATION"));
}

#[test]
fn r9_a_refused_candidate_wait_survives_a_lost_claim_and_the_recovered_pass_resumes_the_stop() {
    // Seed 004 6285-6305, 6317-6329: lease recovery keeps the stored refusal and refunds the
    // attempt; the recovered pass stops the candidate and never prepares it again.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Mismatched]);
    driver.fail(
        "stop_revision",
        &rev,
        ComputeError::retryable("scripted", Some(500)),
    );
    let url = f.db.url.clone();
    let stops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = stops.clone();
    driver.on_call(move |method, _| {
        // The second stop's pass loses its claim (a crash after the stop, before publishing).
        if method == "stop_revision" && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1
        {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute(
                "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() WHERE claim_id IS NOT NULL",
                &[],
            )
            .unwrap();
        }
    });
    run(&f, &driver);
    let k = key(&rev);
    crate::support::expect_work(&mut c, &k).failed_with("INVALID_DRIVER_OBSERVATION");
    assert_eq!(driver.calls_of("prepare_revision"), vec![rev.clone()]);
    assert_eq!(driver.calls_of("stop_revision").len(), 3);
    assert_eq!(
        evidence(&mut c, &k),
        vec![
            "deferred:REFUSED_CANDIDATE_STOP_PENDING",
            "lease_expired:LEASE_EXPIRED",
            "failed:INVALID_DRIVER_OBSERVATION"
        ]
    );
    let (refusals, attempts): (Vec<Option<String>>, Vec<i32>) = c
        .query(
            "SELECT a.refusal, a.attempt FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
             WHERE w.idempotency_key = $1 ORDER BY a.id",
            &[&k],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, Option<String>>(0), r.get::<_, i32>(1)))
        .unzip();
    assert!(refusals
        .iter()
        .all(|r| r.as_deref() == Some("INVALID_DRIVER_OBSERVATION")));
    assert_eq!(
        attempts,
        vec![1, 1, 1],
        "every attempt was refunded but the last"
    );
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn r9_past_the_deadline_a_lifted_refusal_stops_the_candidate_instead_of_preparing_it() {
    // Seed 004 4299-4309: `deploy` granted again while the refused candidate's stop waited; past
    // the convergence deadline the wait stops the candidate and publishes the deadline.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Pending("REVISION_INCOMPLETE")]);
    driver.fail(
        "stop_revision",
        &rev,
        ComputeError::retryable("scripted", Some(500)),
    );
    let url = f.db.url.clone();
    let agent = f.agent.clone();
    driver.on_call(move |method, _| {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        if method == "prepare_revision" {
            c.execute(
                "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
                 VALUES ('admin', ARRAY['deploy'], 'resource', 'ns1', 'agent', $1)",
                &[&agent],
            )
            .unwrap();
        }
        if method == "stop_revision" {
            c.execute("DELETE FROM occ.iam_restrictions", &[]).unwrap();
        }
    });
    let opts = Opts {
        convergence: Duration::from_millis(600),
        ..Opts::default()
    };
    run_with(&f.db, driver.clone(), opts, quiet);
    let (state, code, data, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("CONVERGENCE_DEADLINE_EXCEEDED"))
    );
    assert_eq!(data, Some(json!({"timeoutMs": 600})));
    assert_eq!(driver.calls_of("prepare_revision"), vec![rev.clone()]);
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone(), rev]);
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn r11_a_refused_maintenance_pass_ends_the_chain_with_one_denial() {
    // Seed 004 4287-4291, 4559-4561: a maintenance claim refused by authorization fails and
    // enqueues no further bucket, so the denial is audited once, not once per bucket.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_millis(200)),
        ..ScriptedDriver::default()
    });
    let url = f.db.url.clone();
    let agent = f.agent.clone();
    driver.on_call(move |method, _| {
        // Revoke `deploy` as the deployment activates its revision.
        if method == "activate_revision" {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute(
                "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
                 VALUES ('admin', ARRAY['deploy'], 'resource', 'ns1', 'agent', $1)
                 ON CONFLICT DO NOTHING",
                &[&agent],
            )
            .unwrap();
        }
    });
    let failed = |c: &mut Client| -> i64 {
        c.query_one(
            "SELECT count(*) FROM occ.work_status WHERE operation = 'revision_maintenance' AND state = 'failed_permanent'",
            &[],
        )
        .unwrap()
        .get(0)
    };
    run_until(&f.db, driver.clone(), |c| failed(c) == 1);
    // Give a wrongly enqueued next bucket the time to run.
    run_for(&f.db, driver.clone(), Duration::from_millis(800));
    let rows = c
        .query(
            "SELECT state, reason_code FROM occ.work_status WHERE operation = 'revision_maintenance' ORDER BY id",
            &[],
        )
        .unwrap();
    let states: Vec<(String, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        states,
        vec![(
            "failed_permanent".into(),
            Some("AUTHORIZATION_DENIED".into())
        )]
    );
    assert_eq!(active(&mut c, &f.agent), Some(rev));
    assert_eq!(audits(&mut c, "openclaw.agents.deploy").len(), 1);
}

#[test]
fn r3_a_stopped_agents_candidate_retires_earlier_revisions() {
    // Seed 004 4332-4342: with no other active revision, the stopped Agent's candidate owns
    // retiring its predecessors.
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    stop(&mut c, &f.agent, "admin");
    run(&f, &driver);
    assert_eq!(active(&mut c, &f.agent), None);
    let r2 = deploy(&mut c, &f.agent);
    stop(&mut c, &f.agent, "admin");
    driver.calls.lock().clear();
    run(&f, &driver);
    assert_eq!(
        work(&mut c, &key(&r2)).1.as_deref(),
        Some("REVISION_STOPPED")
    );
    assert_eq!(driver.calls_of("retire_revision"), vec![r1.clone()]);
    let retired: bool = crate::support::one(
        &mut c,
        "SELECT retired_at IS NOT NULL FROM occ.agent_revisions WHERE id = $1",
        &[&r1],
    );
    assert!(retired);
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn r9_a_long_refused_stop_waits_at_least_four_times_as_long_as_it_took() {
    // Seed 004 218-239, 6379-6388: a stop that took 1 s is rechecked no sooner than 4 s later
    // (the old backoff waited 1 s).
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Mismatched]);
    driver.fail(
        "stop_revision",
        &rev,
        ComputeError::retryable("scripted", Some(500)),
    );
    driver.on_call(|method, _| {
        if method == "stop_revision" {
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let k = key(&rev);
    run_with(&f.db, driver.clone(), Opts::default(), |c| {
        evidence(c, &k).len() == 1
    });
    let wait: f64 = crate::support::one(
        &mut c,
        "SELECT extract(epoch FROM available_at - updated_at)::float8 FROM occ.work_status
             WHERE idempotency_key = $1",
        &[&k],
    );
    assert!(wait >= 4.0, "rechecked after {wait} s");
    assert_eq!(
        evidence(&mut c, &k),
        vec!["deferred:REFUSED_CANDIDATE_STOP_PENDING"]
    );
}

#[test]
fn r8_exclusive_replacement_stops_predecessors_before_prepare() {
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver {
        exclusive: true,
        ..ScriptedDriver::default()
    });
    run(&f, &driver);
    driver.calls.lock().clear();
    let r2 = deploy(&mut c, &f.agent);
    run(&f, &driver);
    assert_eq!(
        driver.calls(),
        vec![
            // The Agent's objects before stops and preparation (seed 004 4498-4510).
            ("bind_agent".to_string(), f.agent.clone()),
            ("stop_revision".to_string(), r1.clone()),
            ("prepare_revision".to_string(), r2.clone()),
            ("activate_revision".to_string(), r2.clone()),
            ("retire_revision".to_string(), r1.clone()),
        ]
    );
    assert_eq!(active(&mut c, &f.agent), Some(r2));
}

#[test]
fn r10_transient_failures_defer_without_spending_attempts_others_retry() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        vec![
            Prepare::Fail(ComputeError::transient("scripted", Some(503))),
            Prepare::Fail(ComputeError::retryable("scripted", Some(409))),
        ],
    );
    run(&f, &driver);
    let (_, code, _, attempts) = work(&mut c, &key(&rev));
    assert_eq!(code.as_deref(), Some("REVISION_ACTIVATED"));
    assert_eq!(attempts, 2, "only the retry spent an attempt");
    assert_eq!(
        evidence(&mut c, &key(&rev)),
        vec![
            "deferred:DEPENDENCY_UNAVAILABLE",
            "retry:DEPENDENCY_UNAVAILABLE",
            "succeeded:REVISION_ACTIVATED"
        ]
    );
}

// Seed 004 486-502, 6040-6070: an activation that cannot finish (an error the driver does
// not classify as a converging dependency) waits as REVISION_FINALIZATION_INCOMPLETE instead of
// spending an attempt; the next pass, the revision now active, activates again (R7).
#[test]
fn r6_an_activation_that_cannot_finish_waits_as_finalization_incomplete() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.fail(
        "activate_revision",
        &rev,
        ComputeError::retryable("scripted", Some(409)),
    );
    run(&f, &driver);
    let (_, code, _, attempts) = work(&mut c, &key(&rev));
    assert_eq!(code.as_deref(), Some("REVISION_ALREADY_ACTIVE"));
    assert_eq!(attempts, 1, "the unfinished activation spent no attempt");
    assert_eq!(
        evidence(&mut c, &key(&rev)),
        vec![
            "deferred:REVISION_FINALIZATION_INCOMPLETE",
            "succeeded:REVISION_ALREADY_ACTIVE"
        ]
    );
}

#[test]
fn r6_race_a_stop_admitted_while_the_deployment_prepares_wins() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    let url = f.db.url.clone();
    let agent = f.agent.clone();
    driver.on_call(move |method, _| {
        if method == "prepare_revision" {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute("SELECT occ.agent_stop('ns1', $1, 'admin')", &[&agent])
                .unwrap();
        }
    });
    run(&f, &driver);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_STOPPED")
    );
    assert_eq!(active(&mut c, &f.agent), None);
    assert!(driver.calls_of("activate_revision").is_empty());
    assert!(driver.calls_of("stop_revision").contains(&rev));
    assert!(audits(&mut c, "openclaw.agents.lifecycle.activate").is_empty());
}

#[test]
fn r6_race_a_lost_compare_and_set_retries_active_revision_changed() {
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    let r2 = deploy(&mut c, &f.agent);
    let url = f.db.url.clone();
    let agent = f.agent.clone();
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = fired.clone();
    driver.on_call(move |method, _| {
        if method == "prepare_revision" && !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute(
                "UPDATE occ.agents SET active_revision_id = NULL WHERE id = $1",
                &[&agent],
            )
            .unwrap();
        }
    });
    run(&f, &driver);
    assert_eq!(
        evidence(&mut c, &key(&r2)),
        vec![
            "retry:ACTIVE_REVISION_CHANGED",
            "succeeded:REVISION_ACTIVATED"
        ]
    );
    assert_eq!(active(&mut c, &f.agent), Some(r2));
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.activate").len(),
        2
    );
    let _ = r1;
}

#[test]
fn r6_r7_a_claim_lost_after_activation_ends_with_exactly_one_activation_audit() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    let url = f.db.url.clone();
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = fired.clone();
    driver.on_call(move |method, _| {
        if method == "activate_revision" && !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute(
                "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE claim_id IS NOT NULL",
                &[],
            )
            .unwrap();
        }
    });
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).completed_with("REVISION_ALREADY_ACTIVE");
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    assert_eq!(
        driver.calls_of("activate_revision"),
        vec![rev.clone(), rev.clone()]
    );
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.activate").len(),
        1
    );
    assert_eq!(status(&mut c, &rev).0, "active");
}

#[test]
fn r11_maintenance_reobserves_and_a_failed_observation_never_retires_the_running_revision() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_millis(200)),
        ..ScriptedDriver::default()
    });
    // Reconcile: ready; first maintenance: ready; second: a runtime failure.
    driver.script_prepare(
        &rev,
        vec![
            Prepare::Ready,
            Prepare::Ready,
            Prepare::RuntimeFailure("UNAVAILABLE"),
        ],
    );
    run_until(&f.db, driver.clone(), |c| {
        let failed: i64 = crate::support::one(
            c,
            "SELECT count(*) FROM occ.work_status WHERE operation = 'revision_maintenance' AND state = 'failed_permanent'",
            &[],
        );
        failed == 1
    });
    let rows = c
        .query(
            "SELECT state, reason_code FROM occ.work_status WHERE operation = 'revision_maintenance' ORDER BY id",
            &[],
        )
        .unwrap();
    let states: Vec<(String, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        states[0],
        ("succeeded".into(), Some("REVISION_ALREADY_ACTIVE".into()))
    );
    assert_eq!(
        states[1],
        (
            "failed_permanent".into(),
            Some("RUNTIME_STARTUP_FAILED".into())
        )
    );
    assert!(states.len() >= 3, "the next bucket is enqueued: {states:?}");
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    assert!(driver.calls_of("stop_revision").is_empty());
    assert!(driver.calls_of("retire_revision").is_empty());
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.activate").len(),
        1
    );
    assert_eq!(status(&mut c, &rev).0, "active");
}

#[test]
fn concurrency_200_agents_three_revisions_on_two_worker_processes_end_with_the_newest_active() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for n in 0..20 {
        insert_namespace(&mut c, &format!("ns{n}"), "ready");
        c.execute(
            "SELECT occ.configuration_put($1, 'cfg', '{}', 'admin')",
            &[&format!("ns{n}")],
        )
        .unwrap();
        c.execute(
            "SELECT occ.secret_create($1, 'key', 'k/k/k', 'admin')",
            &[&format!("ns{n}")],
        )
        .unwrap();
    }
    let mut agents = Vec::new();
    for i in 0..200 {
        let ns = format!("ns{}", i % 20);
        let (agent, _) = create_agent(&mut c, &ns, &format!("a{i}"));
        agents.push((ns, agent));
    }
    for _ in 0..3 {
        for (ns, agent) in &agents {
            c.execute(
                "SELECT occ.agent_deploy($1, $2, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'scripted', 'scripted')",
                &[ns, agent],
            )
            .unwrap();
        }
    }
    // Two worker processes at once: a child process (this test binary, `crash_child_worker`
    // in `drain` mode) and this process's worker, 16 threads each. Both drivers record every
    // call per Agent in the database, so a lane shared across processes would show.
    LaneRecorder::setup(&db.url);
    let child = child_worker(&db.url, "drain");
    let driver = Arc::new(ScriptedDriver {
        latency: Duration::from_millis(1),
        lane_db: Some(db.url.clone()),
        ..ScriptedDriver::default()
    });
    let opts = Opts {
        concurrency: 16,
        timeout: Duration::from_secs(60),
        ..Opts::default()
    };
    run_with(&db, driver.clone(), opts, quiet);
    let (exit, stderr) = child.wait(Duration::from_secs(30));
    assert!(exit.success(), "child worker failed: {stderr}");
    let processes: i64 = scalar(
        &mut c,
        "SELECT count(DISTINCT pid) FROM public.occ_driver_calls",
    );
    assert_eq!(processes, 2, "both worker processes made Compute calls");
    let overlaps: i64 = scalar(&mut c, "SELECT count(*) FROM public.occ_driver_overlaps");
    assert_eq!(
        overlaps, 0,
        "no Agent had two Compute calls in flight across processes"
    );
    let wrong: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.agents a JOIN occ.agent_revisions r ON r.agent_id = a.id
             WHERE (r.revision = 3 AND a.active_revision_id IS DISTINCT FROM r.id)
                OR (r.revision < 3 AND r.retired_at IS NULL)",
        &[],
    );
    assert_eq!(wrong, 0);
    let dup: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM (SELECT resource_id FROM occ.audit_events
               WHERE action = 'openclaw.agents.lifecycle.activate' GROUP BY resource_id HAVING count(*) <> 1) d",
        &[],
    );
    assert_eq!(dup, 0);
    let (activated, audited): (i64, i64) = {
        let r = c
            .query_one(
                "SELECT (SELECT count(*) FROM occ.work WHERE reason_code IN ('REVISION_ACTIVATED', 'REVISION_ALREADY_ACTIVE')),
                        (SELECT count(DISTINCT resource_id) FROM occ.audit_events WHERE action = 'openclaw.agents.lifecycle.activate')",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        activated, audited,
        "one activation audit per activated revision"
    );
    assert!(activated >= 200);
    let failed: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work_status WHERE state <> 'succeeded'",
        &[],
    );
    assert_eq!(failed, 0);
    assert_eq!(
        driver.overlaps.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no Agent had two claims at once"
    );
}

#[test]
fn r9_authorization_revoked_mid_deployment_stops_the_candidate_before_failing() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Pending("REVISION_INCOMPLETE")]);
    let url = f.db.url.clone();
    let agent = f.agent.clone();
    driver.on_call(move |method, _| {
        if method == "prepare_revision" {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute(
                "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
                 VALUES ('admin', ARRAY['deploy'], 'resource', 'ns1', 'agent', $1)",
                &[&agent],
            )
            .unwrap();
        }
    });
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("AUTHORIZATION_DENIED");
    assert_eq!(
        driver.calls(),
        vec![
            // bind_agent precedes preparation and the refused candidate's stop (seed 004
            // 4498-4510, 6227-6230).
            ("bind_agent".to_string(), f.agent.clone()),
            ("prepare_revision".to_string(), rev.clone()),
            ("bind_agent".to_string(), f.agent.clone()),
            ("stop_revision".to_string(), rev.clone())
        ]
    );
    let a = audits(&mut c, "openclaw.agents.deploy");
    assert_eq!(a.len(), 1);
    // The deploy denial's resource is the Agent (seed 004 6798-6823).
    assert_eq!(
        (a[0].0.as_str(), a[0].3.as_str()),
        ("authorization_denial", f.agent.as_str())
    );
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn r2_a_pointer_to_another_agents_revision_is_invalid_active_revision() {
    let f = fixture();
    let mut c = f.db.client();
    let (other, _) = create_agent(&mut c, "ns1", "other");
    let foreign = deploy(&mut c, &other);
    c.execute("DELETE FROM occ.work", &[]).unwrap();
    let rev = deploy(&mut c, &f.agent);
    c.batch_execute("SET session_replication_role = replica")
        .unwrap();
    c.execute(
        "UPDATE occ.agents SET active_revision_id = $2 WHERE id = $1",
        &[&f.agent, &foreign],
    )
    .unwrap();
    c.batch_execute("SET session_replication_role = origin")
        .unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("INVALID_ACTIVE_REVISION")
    );
    assert!(driver.calls().is_empty());
}

pub(crate) fn maintenance_work(c: &mut Client, agent: &str, rev: &str) -> String {
    let key = format!("agent_revision:{rev}:maintenance:1");
    c.execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
         VALUES ($1, 'ns1', $2, $3, 'admin')",
        &[&key, &agent, &rev],
    )
    .unwrap();
    key
}

#[test]
fn r11_maintenance_never_reactivates_a_failed_deployment() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::RuntimeFailure("UNAVAILABLE")]);
    run(&f, &driver);
    driver.calls.lock().clear();
    let m = maintenance_work(&mut c, &f.agent, &rev);
    run(&f, &driver);
    crate::support::expect_work(&mut c, &m).failed_with("REVISION_SUPERSEDED");
    assert!(driver.calls().is_empty());
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn r11_maintenance_of_a_revision_no_longer_active_is_superseded() {
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    let r2 = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    driver.calls.lock().clear();
    let m = maintenance_work(&mut c, &f.agent, &r1);
    run(&f, &driver);
    assert_eq!(
        work(&mut c, &m).1.as_deref(),
        Some("REVISION_MAINTENANCE_SUPERSEDED")
    );
    assert!(driver.calls().is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(r2));
}

#[test]
fn r12_status_view_reports_pending_while_queued_and_failed_with_its_error() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    assert_eq!(status(&mut c, &rev), ("pending".into(), None, json!([])));
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Mismatched]);
    run(&f, &driver);
    assert_eq!(
        status(&mut c, &rev),
        (
            "failed".into(),
            Some("INVALID_DRIVER_OBSERVATION".into()),
            json!([])
        )
    );
}

#[test]
fn r9_a_driver_refusal_during_prepare_stops_the_candidate_before_failing() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        vec![Prepare::Fail(ComputeError::permanent(
            "HARNESS_BINDING_REFUSED",
            "scripted",
            None,
        ))],
    );
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("HARNESS_BINDING_REFUSED");
    assert_eq!(
        driver.calls(),
        vec![
            // bind_agent precedes preparation and the refused candidate's stop (seed 004
            // 4498-4510, 6227-6230).
            ("bind_agent".to_string(), f.agent.clone()),
            ("prepare_revision".to_string(), rev.clone()),
            ("bind_agent".to_string(), f.agent.clone()),
            ("stop_revision".to_string(), rev.clone())
        ]
    );
}

/// The environment variable that turns `crash_child_worker` into a worker process on the
/// database it names; `OCC_CRASH_CHILD_MODE` says which script it runs.
const CHILD_DB: &str = "OCC_CRASH_CHILD_DB";
const CHILD_MODE: &str = "OCC_CRASH_CHILD_MODE";

/// Not a test of its own: returns at once unless started as a child worker process by a test
/// below (the shipped binary cannot load the scripted driver, so the test binary is the child).
///
/// Modes: `block:<method>` records a row in `public.crash_marks` when `<method>` is called,
/// then blocks far longer than the lease, until the parent kills the process; `drain` runs
/// with the cross-process lane recorder until the queue is quiet, then exits.
#[test]
fn crash_child_worker() {
    let Ok(url) = std::env::var(CHILD_DB) else {
        return;
    };
    let mode = std::env::var(CHILD_MODE).expect("child mode");
    if let Some(method) = mode.strip_prefix("block:") {
        let driver = Arc::new(ScriptedDriver::new());
        let (hook_url, method) = (url.clone(), method.to_string());
        driver.on_call(move |m, target| {
            if m == method {
                let mut c = postgres::Client::connect(&hook_url, postgres::NoTls).unwrap();
                c.execute(
                    "INSERT INTO public.crash_marks (pid, method, target) VALUES ($1, $2, $3)",
                    &[&(std::process::id() as i32), &m, &target],
                )
                .unwrap();
                std::thread::sleep(Duration::from_secs(120));
            }
        });
        let opts = Opts {
            lease: Duration::from_millis(1500),
            timeout: Duration::from_secs(120),
            ..Opts::default()
        };
        run_on(&url, driver, opts, |_| false);
    } else {
        assert_eq!(mode, "drain");
        let driver = Arc::new(ScriptedDriver {
            latency: Duration::from_millis(1),
            lane_db: Some(url.clone()),
            ..ScriptedDriver::default()
        });
        let opts = Opts {
            concurrency: 16,
            timeout: Duration::from_secs(120),
            ..Opts::default()
        };
        run_on(&url, driver, opts, quiet);
    }
}

/// Starts this test binary as a child worker process (`crash_child_worker`) in `mode`.
fn child_worker(url: &str, mode: &str) -> WorkerProcess {
    let exe = std::env::current_exe().expect("test binary");
    let child = std::process::Command::new(exe)
        .args(["--exact", "revision::crash_child_worker", "--nocapture"])
        .env(CHILD_DB, url)
        .env(CHILD_MODE, mode)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child worker");
    WorkerProcess::capture(child)
}

/// Deploys r1 and activates it in-process, then admits r2 and lets a child worker process
/// block in `method` on r2 until it is killed with SIGKILL; returns (r1, r2).
fn kill_a_child_worker_inside(f: &Fixture, method: &str) -> (String, String) {
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    run(f, &Arc::new(ScriptedDriver::new()));
    assert_eq!(active(&mut c, &f.agent), Some(r1.clone()));
    c.batch_execute(
        "CREATE TABLE public.crash_marks (pid integer NOT NULL, method text NOT NULL, target text NOT NULL)",
    )
    .unwrap();
    let r2 = deploy(&mut c, &f.agent);
    let child = child_worker(&f.db.url, &format!("block:{method}"));
    wait_for(
        &format!("the child worker to enter {method}"),
        Duration::from_secs(30),
        || {
            let n: i64 = scalar(
                &mut c,
                &format!("SELECT count(*) FROM public.crash_marks WHERE method = '{method}'"),
            );
            n > 0
        },
    );
    let pid: i32 = scalar(&mut c, "SELECT pid FROM public.crash_marks");
    assert_eq!(
        pid,
        child.pid(),
        "the child process, not this one, claimed the work"
    );
    child.signal("KILL");
    let (status, _) = child.wait(Duration::from_secs(10));
    assert!(!status.success(), "killed, not exited: {status:?}");
    let (state, _, _, _) = work(&mut c, &key(&r2));
    assert_eq!(
        state, "claimed",
        "the dead process still holds the claim until its lease"
    );
    (r1, r2)
}

/// After the kill, this process's worker recovers the expired claim and finishes r2.
fn finish_after_the_lease(f: &Fixture, r1: &str, r2: &str, code: &str) {
    let driver = Arc::new(ScriptedDriver::new());
    let work_key = key(r2);
    run_until(&f.db, driver.clone(), move |c| {
        let state: String = crate::support::one(
            c,
            "SELECT state FROM occ.work_status WHERE idempotency_key = $1",
            &[&work_key],
        );
        state == "succeeded"
    });
    let mut c = f.db.client();
    let (state, got, _, _) = work(&mut c, &key(r2));
    assert_eq!((state.as_str(), got.as_deref()), ("succeeded", Some(code)));
    let ev = evidence(&mut c, &key(r2));
    assert_eq!(
        ev,
        vec![
            "lease_expired:LEASE_EXPIRED".to_string(),
            format!("succeeded:{code}")
        ]
    );
    assert_eq!(active(&mut c, &f.agent).as_deref(), Some(r2));
    let activations: Vec<String> = audits(&mut c, "openclaw.agents.lifecycle.activate")
        .into_iter()
        .map(|a| a.3)
        .collect();
    assert_eq!(activations, vec![r1.to_string(), r2.to_string()]);
    let retired: bool = crate::support::one(
        &mut c,
        "SELECT retired_at IS NOT NULL FROM occ.agent_revisions WHERE id = $1",
        &[&r1],
    );
    assert!(retired, "the earlier revision is retired");
    assert_eq!(driver.calls_of("retire_revision"), vec![r1.to_string()]);
    assert_eq!(driver.calls_of("activate_revision"), vec![r2.to_string()]);
    assert_eq!(status(&mut c, r2).0, "active");
}

#[test]
fn w_a_worker_killed_during_prepare_is_finished_by_another_process_after_its_lease() {
    let f = fixture();
    let (r1, r2) = kill_a_child_worker_inside(&f, "prepare_revision");
    let mut c = f.db.client();
    assert_eq!(
        active(&mut c, &f.agent),
        Some(r1.clone()),
        "no CAS before the kill"
    );
    finish_after_the_lease(&f, &r1, &r2, "REVISION_ACTIVATED");
}

#[test]
fn w_a_worker_killed_after_the_pointer_cas_is_finished_as_already_active_with_one_audit() {
    let f = fixture();
    let (r1, r2) = kill_a_child_worker_inside(&f, "activate_revision");
    let mut c = f.db.client();
    assert_eq!(
        active(&mut c, &f.agent),
        Some(r2.clone()),
        "the CAS committed before the kill"
    );
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.activate").len(),
        1,
        "the killed process published no activation audit"
    );
    finish_after_the_lease(&f, &r1, &r2, "REVISION_ALREADY_ACTIVE");
}

fn deploy_embedded(c: &mut Client, agent: &str) -> String {
    let v: Value = crate::support::one(
        c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'openclaw', 'embedded', 'key', 'scripted', 'scripted')",
        &[&agent],
    );
    v["revisionId"].as_str().unwrap().to_string()
}

#[test]
fn r9_a_refused_embedded_candidate_beside_an_active_revision_is_left_alone() {
    // Seed 004 6190-6212: a non-exclusive candidate may own the Agent's shared Gateway route
    // while another revision is active, so its refusal does not stop it.
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy_embedded(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    assert_eq!(active(&mut c, &f.agent), Some(r1.clone()));
    let r2 = deploy_embedded(&mut c, &f.agent);
    driver.script_prepare(
        &r2,
        vec![Prepare::Fail(ComputeError::permanent(
            "HARNESS_IMAGE_UNAVAILABLE",
            "scripted",
            None,
        ))],
    );
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&r2)).failed_with("HARNESS_IMAGE_UNAVAILABLE");
    assert!(driver.calls_of("stop_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(r1));
}

#[test]
fn r9_a_refused_candidate_of_a_namespace_no_longer_ready_is_not_stopped() {
    // Seed 004 6190-6200: the refused-candidate stop requires the Namespace to be ready.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver {
        exclusive: true,
        ..ScriptedDriver::default()
    });
    c.execute(
        "UPDATE occ.namespaces SET status = 'failed' WHERE id = 'ns1'",
        &[],
    )
    .unwrap();
    run(&f, &driver);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("NAMESPACE_NOT_READY")
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
}

#[test]
fn r5_pending_reasons_map_through_the_seed_table() {
    // Seed 004 196-214, 504-509: a known driver reason maps to its code, anything else is
    // REVISION_INCOMPLETE.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        vec![
            Prepare::Pending("WORKLOAD_UNSCHEDULABLE"),
            Prepare::Pending("SOMETHING_THE_SEED_DOES_NOT_NAME"),
            Prepare::Pending("REVISION_UNSCHEDULABLE"),
        ],
    );
    run(&f, &driver);
    assert_eq!(
        evidence(&mut c, &key(&rev)),
        vec![
            "deferred:REVISION_UNSCHEDULABLE",
            "deferred:REVISION_INCOMPLETE",
            "deferred:REVISION_INCOMPLETE",
            "succeeded:REVISION_ACTIVATED"
        ]
    );
}

#[test]
fn r5_plugin_warnings_outside_the_seed_vocabulary_are_invalid_observations() {
    // Seed 004 1017-1033: only PLUGIN_INSTALL_FAILED and PLUGIN_AUTH_REQUIRED, for an admitted
    // plugin.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        vec![Prepare::ReadyWithWarning("PLUGIN_DEGRADED", "web")],
    );
    run(&f, &driver);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("INVALID_DRIVER_OBSERVATION")
    );
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn r6_n14_a_dedicated_agent_is_deactivated_before_its_first_pointer_commit_in_production() {
    // SPEC N14: `deactivate_revision` before the first pointer commit of a dedicated Agent, in
    // production only, never when a revision is already active.
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    let production = crate::scripted::Opts {
        mode: occ_worker::config::Mode::Production,
        ..Default::default()
    };
    crate::scripted::run_with(&f.db, driver.clone(), production, quiet);
    assert_eq!(
        driver.calls(),
        vec![
            ("bind_agent".to_string(), f.agent.clone()),
            ("prepare_revision".to_string(), r1.clone()),
            ("deactivate_revision".to_string(), r1.clone()),
            ("activate_revision".to_string(), r1.clone()),
        ]
    );
    driver.calls.lock().clear();
    let r2 = deploy(&mut c, &f.agent);
    crate::scripted::run_with(&f.db, driver.clone(), production, quiet);
    assert!(driver.calls_of("deactivate_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(r2));
    // A development worker never deactivates, even before a dedicated Agent's first pointer.
    let g = fixture();
    let mut c = g.db.client();
    let r1 = deploy(&mut c, &g.agent);
    let driver = Arc::new(ScriptedDriver::new());
    run(&g, &driver);
    assert_eq!(active(&mut c, &g.agent), Some(r1));
    assert!(driver.calls_of("deactivate_revision").is_empty());
}

#[test]
fn z2_a_failed_binding_of_the_active_revision_defers_on_its_reconcile_key() {
    // SPEC Z2 / seed 004 4498-4510: a bind_agent failure while the revision is active is
    // COMPUTE_BINDING_INCOMPLETE by the active path; a candidate's follows R10.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    requeue(&mut c, &key(&rev));
    driver.fail(
        "bind_agent",
        &f.agent,
        ComputeError::retryable("scripted", Some(500)),
    );
    run(&f, &driver);
    let ev = evidence(&mut c, &key(&rev));
    assert!(
        ev.contains(&"deferred:COMPUTE_BINDING_INCOMPLETE".to_string()),
        "{ev:?}"
    );
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_ALREADY_ACTIVE")
    );
}

/// Recovery runs a finished work again (the active revision's reconcile work, say).
pub(crate) fn requeue(c: &mut Client, key: &str) {
    c.execute(
        "UPDATE occ.work SET state = 'queued', reason_code = NULL, result_data = NULL,
             completed_at = NULL, available_at = now() WHERE idempotency_key = $1",
        &[&key],
    )
    .unwrap();
}

/// Whether the work `key` ended (succeeded or failed for good).
pub(crate) fn ended(c: &mut Client, key: &str) -> bool {
    matches!(work(c, key).0.as_str(), "succeeded" | "failed_permanent")
}

/// Deletes the Namespace's Secret `key`, the `secret` harness auth of every `deploy`.
fn delete_harness_secret(c: &mut Client) {
    c.execute(
        "DELETE FROM occ.secrets WHERE namespace_id = 'ns1' AND id = 'key'",
        &[],
    )
    .unwrap();
}

#[test]
fn z2_z4_an_active_revision_whose_harness_secret_is_gone_defers_its_reconcile_work_and_stops_nothing(
) {
    // Seed 004 4474-4486, 6510-6536: an unresolved Secret context of the active revision takes
    // the active path: its reconcile work defers with the code (the deadline applies), nothing
    // is stopped and the pointer stays.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    delete_harness_secret(&mut c);
    let k = key(&rev);
    requeue(&mut c, &k);
    driver.clear_calls();
    run_until(&f.db, driver.clone(), |c| evidence(c, &k).len() >= 2);
    let ev = evidence(&mut c, &k);
    assert_eq!(ev[0], "succeeded:REVISION_ACTIVATED");
    assert!(
        ev[1..]
            .iter()
            .all(|e| e == "deferred:HARNESS_AUTH_SOURCE_UNAVAILABLE"),
        "{ev:?}"
    );
    assert_eq!(work(&mut c, &k).0, "queued", "deferred, not ended");
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    // Past the convergence deadline the wait ends with the deadline, still stopping nothing.
    let opts = Opts {
        convergence: Duration::from_millis(1),
        ..Opts::default()
    };
    run_with(&f.db, driver.clone(), opts, |c| ended(c, &k));
    let (_, code, data, _) = work(&mut c, &k);
    assert_eq!(code.as_deref(), Some("CONVERGENCE_DEADLINE_EXCEEDED"));
    assert_eq!(data, Some(json!({"timeoutMs": 1})));
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    assert_eq!(active(&mut c, &f.agent), Some(rev));
    assert!(audits(&mut c, "openclaw.agents.deploy").is_empty());
}

#[test]
fn z2_z4_an_active_revision_whose_harness_secret_is_gone_fails_its_maintenance_claim_and_keeps_the_chain(
) {
    // Seed 004 4474-4486, 6537-6580: on a maintenance key the active path fails this claim
    // with the code and enqueues the next bucket; the revision stays active and nothing is
    // stopped.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    run(&f, &Arc::new(ScriptedDriver::new()));
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    delete_harness_secret(&mut c);
    let m = maintenance_work(&mut c, &f.agent, &rev);
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_millis(200)),
        ..ScriptedDriver::default()
    });
    let buckets = |c: &mut Client| -> i64 {
        scalar(
            c,
            "SELECT count(*) FROM occ.work WHERE operation = 'revision_maintenance'",
        )
    };
    // The next bucket is enqueued with the failure, in one transaction.
    let first = m.clone();
    run_until(&f.db, driver.clone(), move |c| ended(c, &first));
    assert!(buckets(&mut c) >= 2, "the next bucket is enqueued");
    crate::support::expect_work(&mut c, &m).failed_with("HARNESS_AUTH_SOURCE_UNAVAILABLE");
    let next: Vec<String> = c
        .query(
            "SELECT idempotency_key FROM occ.work
             WHERE operation = 'revision_maintenance' AND idempotency_key <> $1",
            &[&m],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        !next.is_empty()
            && next
                .iter()
                .all(|k| k.starts_with(&format!("agent_revision:{rev}:maintenance:"))),
        "the chain is kept: {next:?}"
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    assert_eq!(status(&mut c, &rev).0, "active");
    assert!(audits(&mut c, "openclaw.agents.deploy").is_empty());
}

/// A candidate whose invalid observation is refused and whose first refused-candidate stop
/// fails: the work waits as REFUSED_CANDIDATE_STOP_PENDING with the stored refusal, and
/// `then` runs inside that failed stop.
fn refused_candidate_waiting(
    driver: &ScriptedDriver,
    rev: &str,
    then: impl Fn(&mut Client) + Send + Sync + 'static,
    url: &str,
) {
    driver.script_prepare(rev, vec![Prepare::Mismatched]);
    driver.fail(
        "stop_revision",
        rev,
        ComputeError::retryable("scripted", Some(500)),
    );
    let url = url.to_string();
    let once = std::sync::atomic::AtomicBool::new(false);
    driver.on_call(move |method, _| {
        if method == "stop_revision" && !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            then(&mut postgres::Client::connect(&url, postgres::NoTls).unwrap());
        }
    });
}

#[test]
fn r3_r9_a_stopped_agent_wins_over_a_stored_refusal() {
    // Seed 004 4299-4363: the stored refusal is decided again, then a stopped Agent stops the
    // candidate and the work ends REVISION_STOPPED instead of publishing the refusal.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    let agent = f.agent.clone();
    refused_candidate_waiting(
        &driver,
        &rev,
        move |c| {
            c.execute("SELECT occ.agent_stop('ns1', $1, 'admin')", &[&agent])
                .unwrap();
        },
        &f.db.url,
    );
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).completed_with("REVISION_STOPPED");
    assert_eq!(
        evidence(&mut c, &key(&rev)),
        vec![
            "deferred:REFUSED_CANDIDATE_STOP_PENDING",
            "succeeded:REVISION_STOPPED"
        ]
    );
    assert_eq!(driver.calls_of("prepare_revision"), vec![rev.clone()]);
    // The failed refused-candidate stop, the revision's own R3 stop and the Agent stop's.
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone(); 3]);
    assert_eq!(active(&mut c, &f.agent), None);
    assert_eq!(status(&mut c, &rev).0, "stopped");
}

#[test]
fn r4_r9_a_successor_supersedes_a_stored_refusal_once_the_candidate_is_stopped() {
    // Seed 004 4365-4422: a newer revision requiring stopped predecessors supersedes this one
    // over its stored refusal; the candidate whose stop the work waited on is stopped first,
    // and a failed stop keeps waiting with the refusal.
    let f = fixture();
    let mut c = f.db.client();
    let r1 = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver {
        exclusive: true,
        ..ScriptedDriver::default()
    });
    let agent = f.agent.clone();
    refused_candidate_waiting(
        &driver,
        &r1,
        move |c| {
            // The successor is admitted; its own work waits, so only r1's work runs.
            let r2 = deploy(c, &agent);
            c.execute(
                "UPDATE occ.work SET available_at = now() + interval '1 hour'
                 WHERE idempotency_key = $1",
                &[&key(&r2)],
            )
            .unwrap();
        },
        &f.db.url,
    );
    // The stop before the hand-off fails once too.
    driver.fail(
        "stop_revision",
        &r1,
        ComputeError::retryable("scripted", Some(500)),
    );
    let k = key(&r1);
    run_until(&f.db, driver.clone(), |c| ended(c, &k));
    crate::support::expect_work(&mut c, &k).completed_with("REVISION_SUPERSEDED");
    assert_eq!(
        evidence(&mut c, &k),
        vec![
            "deferred:REFUSED_CANDIDATE_STOP_PENDING",
            "deferred:REFUSED_CANDIDATE_STOP_PENDING",
            "succeeded:REVISION_SUPERSEDED"
        ]
    );
    let refusals: Vec<Option<String>> = c
        .query(
            "SELECT a.refusal FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
             WHERE w.idempotency_key = $1 AND a.outcome = 'deferred' ORDER BY a.id",
            &[&k],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        refusals,
        vec![Some("INVALID_DRIVER_OBSERVATION".to_string()); 2]
    );
    assert_eq!(driver.calls_of("prepare_revision"), vec![r1.clone()]);
    assert_eq!(driver.calls_of("stop_revision"), vec![r1.clone(); 3]);
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.supersede").len(),
        1
    );
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn r11_maintenance_of_a_failed_deployment_ends_before_authorization() {
    // Seed 004 4253-4266, 4288-4292: a maintenance pass of a failed deployment ends
    // REVISION_SUPERSEDED before its actor's authorization is decided again: no denial.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::RuntimeFailure("UNAVAILABLE")]);
    run(&f, &driver);
    assert_eq!(work(&mut c, &key(&rev)).0, "failed_permanent");
    c.execute(
        "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ('admin', ARRAY['deploy'], 'resource', 'ns1', 'agent', $1)",
        &[&f.agent],
    )
    .unwrap();
    driver.clear_calls();
    let m = maintenance_work(&mut c, &f.agent, &rev);
    run(&f, &driver);
    crate::support::expect_work(&mut c, &m).failed_with("REVISION_SUPERSEDED");
    assert!(audits(&mut c, "openclaw.agents.deploy").is_empty());
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn r3_z4_a_stopped_agent_wins_over_a_candidates_unresolved_secret_context() {
    // Seed 004 4311-4363, 4474-4486: the Secret context is resolved after R3, so a candidate
    // whose harness Secret is gone is stopped, not refused.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    delete_harness_secret(&mut c);
    stop(&mut c, &f.agent, "admin");
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).completed_with("REVISION_STOPPED");
    assert!(driver.calls_of("prepare_revision").is_empty());
    assert!(driver.calls_of("stop_revision").contains(&rev));
    assert_eq!(active(&mut c, &f.agent), None);
    assert_eq!(status(&mut c, &rev).0, "stopped");
}

/// Maintenance works of `rev` that ended `state` with `code`.
fn maintenance_ended(c: &mut Client, rev: &str, state: &str, code: &str) -> i64 {
    crate::support::one(
        c,
        "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE $1 AND state = $2
           AND reason_code = $3",
        &[
            &format!("agent_revision:{rev}:maintenance:%"),
            &state,
            &code,
        ],
    )
}

/// Maintenance works of `rev` still queued.
fn maintenance_queued(c: &mut Client, rev: &str) -> i64 {
    crate::support::one(
        c,
        "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE $1 AND state = 'queued'",
        &[&format!("agent_revision:{rev}:maintenance:%")],
    )
}

/// An active revision on a driver with a short maintenance interval, and that driver.
fn maintained_active(f: &Fixture, c: &mut Client) -> (String, Arc<ScriptedDriver>) {
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_millis(300)),
        ..ScriptedDriver::default()
    });
    let rev = deploy(c, &f.agent);
    run_until(&f.db, driver.clone(), |c| {
        work(c, &key(&rev)).0 == "succeeded"
    });
    (rev, driver)
}

// SPEC Z2 (seed 6556-6571): a maintenance claim failing on the active path completes
// `REVISION_MAINTENANCE_SUPERSEDED` and ends its chain when, under the Agent's lock, the Agent
// has moved on (here: a stop admitted while the pass observed).
#[test]
fn z2_a_failing_maintenance_claim_of_an_agent_that_moved_on_completes_superseded() {
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = maintained_active(&f, &mut c);
    driver.script_prepare(&rev, vec![Prepare::Pending("WORKLOAD_UNSCHEDULABLE")]);
    let (url, agent) = (f.db.url.clone(), f.agent.clone());
    driver.on_call(move |method, _| {
        if method == "prepare_revision" {
            let mut c = Client::connect(&url, postgres::NoTls).unwrap();
            let _ = c.execute("SELECT occ.agent_stop('ns1', $1, 'admin')", &[&agent]);
        }
    });
    run_until(&f.db, driver.clone(), |c| {
        maintenance_ended(c, &rev, "succeeded", "REVISION_MAINTENANCE_SUPERSEDED") == 1
    });
    assert_eq!(
        maintenance_ended(&mut c, &rev, "failed_permanent", "REVISION_UNSCHEDULABLE"),
        0
    );
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(maintenance_queued(&mut c, &rev), 0, "the chain ended");
}

// SPEC Z2 (seed 4548-4600, 6510-6592): a transient preparation failure of the active revision
// fails its maintenance claim at once with the dependency's code and keeps the chain; it is
// no candidate retry.
#[test]
fn n13_a_transient_prepare_error_of_a_maintenance_pass_fails_the_claim_and_keeps_the_chain() {
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = maintained_active(&f, &mut c);
    driver.clear_calls();
    driver.script_prepare(
        &rev,
        vec![Prepare::Fail(ComputeError::transient(
            "scripted",
            Some(503),
        ))],
    );
    run_until(&f.db, driver.clone(), |c| {
        maintenance_ended(c, &rev, "failed_permanent", "DEPENDENCY_UNAVAILABLE") == 1
    });
    let attempts: i32 = crate::support::one(
        &mut c,
        "SELECT attempt_count FROM occ.work_status WHERE idempotency_key LIKE $1
           AND state = 'failed_permanent'",
        &[&format!("agent_revision:{rev}:maintenance:%")],
    );
    assert_eq!(attempts, 1, "no retry of the claim");
    run_until(&f.db, driver.clone(), |c| maintenance_queued(c, &rev) == 1);
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

// Seed R6 after the pointer commit (6010-6020): a stop admitted right after the commit stops
// the revision instead of activating it: REVISION_STOPPED, no activation call.
#[test]
fn f135_a_stop_admitted_right_after_the_pointer_commit_stops_instead_of_activating() {
    let f = fixture();
    let mut c = f.db.client();
    // The stop lands in the pointer commit's own statement, as if admitted just after it.
    c.batch_execute(
        "CREATE FUNCTION public.stop_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.active_revision_id IS DISTINCT FROM OLD.active_revision_id
                AND NEW.active_revision_id IS NOT NULL THEN
                 NEW.desired_runtime_state := 'stopped';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER stop_at_commit BEFORE UPDATE ON occ.agents
             FOR EACH ROW EXECUTE FUNCTION public.stop_at_commit();",
    )
    .unwrap();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    run_until(&f.db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &key(&rev)).completed_with("REVISION_STOPPED");
    assert!(
        driver.calls_of("activate_revision").is_empty(),
        "{:?}",
        driver.log()
    );
    assert_eq!(driver.calls_of("stop_revision"), vec![rev]);
}

// Seed 437-478, 6372-6388 (X19): a refused candidate's stop that yields (still draining) is no
// failure: after the stored refusal, yields record no evidence and never double the backoff,
// while failed stops do.
#[test]
fn x19_yielded_refused_stops_do_not_double_the_backoff_failed_ones_do() {
    for (error, doubling) in [
        (ComputeError::draining("scripted"), false),
        (ComputeError::retryable("scripted", Some(500)), true),
    ] {
        let f = fixture();
        let mut c = f.db.client();
        let rev = deploy(&mut c, &f.agent);
        let driver = Arc::new(ScriptedDriver::new());
        driver.script_prepare(&rev, vec![Prepare::Mismatched]);
        for _ in 0..4 {
            driver.fail("stop_revision", &rev, error.clone());
        }
        run(&f, &driver);
        crate::support::expect_work(&mut c, &key(&rev)).failed_with("INVALID_DRIVER_OBSERVATION");
        assert_eq!(driver.calls_of("stop_revision").len(), 5);
        let waits = evidence(&mut c, &key(&rev))
            .iter()
            .filter(|e| *e == "deferred:REFUSED_CANDIDATE_STOP_PENDING")
            .count();
        assert_eq!(waits, if doubling { 4 } else { 1 }, "{error:?}");
    }
}

/// kind, source, IAM driver id, authorization request, decision reason.
type Envelope = (
    String,
    String,
    Option<String>,
    Option<Value>,
    Option<String>,
);

// Seed 3021-3046, 3812-3851 (F168): every audit event carries its envelope, `source` and the
// IAM driver that decided it; a denial also carries its request (`authorization`) and the
// decision's reason (`decisionReason`) at the top level, as `admin audit` shows them.
#[test]
fn f168_audit_events_carry_source_iam_driver_and_a_denials_authorization() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    c.execute(
        "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ('admin', ARRAY['read'], 'resource', 'ns1', 'configuration', 'cfg')",
        &[],
    )
    .unwrap();
    assert_refused(&f, &rev, "AUTHORIZATION_DENIED");
    let rows: Vec<Envelope> = c
        .query(
            "SELECT kind, source, iam_driver_id, authorization_request, decision_reason
             FROM occ.audit_events ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    assert!(rows.len() >= 2, "{rows:?}");
    for (kind, source, driver, authorization, reason) in &rows {
        assert_eq!(source, "occ");
        assert_eq!(driver.as_deref(), Some("native-iam"));
        assert_eq!(
            (authorization.is_some(), reason.is_some()),
            (
                kind == "authorization_denial",
                kind == "authorization_denial"
            ),
            "{kind}"
        );
    }
    let denial = rows
        .iter()
        .find(|r| r.0 == "authorization_denial")
        .expect("the denial");
    let request = denial.3.as_ref().unwrap();
    assert_eq!(request["principalId"], "admin", "{request}");
    assert_eq!(request["action"], "read", "{request}");
    assert_eq!(denial.4.as_deref(), Some("RESTRICTED"));
    // `admin audit` shows the envelope.
    let listed: Value = crate::support::one(&mut c, "SELECT occ.audit_list('ns1')", &[]);
    let shown = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "authorization_denial")
        .expect("listed")
        .clone();
    assert_eq!(shown["source"], "occ");
    assert_eq!(shown["iamDriverId"], "native-iam");
    assert_eq!(&shown["authorization"], request);
    assert_eq!(shown["decisionReason"], "RESTRICTED");
}

// SPEC R9 (seed 4400-4407): a stored wait whose evidence names no refusal publishes
// UNKNOWN_FAILURE once the candidate is stopped, instead of preparing it again.
#[test]
fn r9_a_stored_wait_naming_no_refusal_publishes_unknown_failure_once_stopped() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    c.execute(
        "INSERT INTO occ.work_attempts (work_id, attempt, code, outcome, refusal)
         SELECT id, 1, 'REFUSED_CANDIDATE_STOP_PENDING', 'deferred', NULL
         FROM occ.work WHERE idempotency_key = $1",
        &[&key(&rev)],
    )
    .unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("UNKNOWN_FAILURE");
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone()]);
    assert!(driver.calls_of("prepare_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), None);
}

// SPEC R11, Z2 (seed 6592-6600): an activation of the running active revision that does not
// finish on a maintenance pass fails that claim with its code and keeps the chain; the
// revision stays active.
#[test]
fn r11_an_unfinished_activation_on_maintenance_fails_the_claim_and_keeps_the_chain() {
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = maintained_active(&f, &mut c);
    driver.fail(
        "activate_revision",
        &rev,
        ComputeError::retryable("scripted", Some(409)),
    );
    run_until(&f.db, driver.clone(), |c| {
        maintenance_ended(
            c,
            &rev,
            "failed_permanent",
            "REVISION_FINALIZATION_INCOMPLETE",
        ) == 1
    });
    run_until(&f.db, driver.clone(), |c| maintenance_queued(c, &rev) == 1);
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    assert!(driver.calls_of("stop_revision").is_empty());
}

// SPEC R9 (seed 399-402, 6305-6358): a refused candidate's stop wait whose rows can no longer
// be decoded leaves the pass an ordinary retry, which the attempt limit ends; never a wait
// repeated forever.
#[test]
fn r9_an_undecodable_row_ends_a_refusal_wait_at_the_attempt_limit() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    let agent = f.agent.clone();
    refused_candidate_waiting(
        &driver,
        &rev,
        move |c| {
            c.batch_execute("ALTER TABLE occ.agents DROP CONSTRAINT agents_status_check")
                .unwrap();
            c.execute(
                "UPDATE occ.agents SET status = 'mangled', desired_runtime_state = 'stopped'
                 WHERE id = $1",
                &[&agent],
            )
            .unwrap();
        },
        &f.db.url,
    );
    run_until(&f.db, driver.clone(), |c| {
        work(c, &key(&rev)).0 == "failed_permanent"
    });
    let (_, code, _, attempts) = work(&mut c, &key(&rev));
    assert_eq!(
        (code.as_deref(), attempts),
        (Some("DEPENDENCY_UNAVAILABLE"), 5)
    );
    let seen = evidence(&mut c, &key(&rev));
    assert_eq!(seen[0], "deferred:REFUSED_CANDIDATE_STOP_PENDING");
    assert_eq!(
        seen.last().unwrap(),
        "failed:DEPENDENCY_UNAVAILABLE",
        "{seen:?}"
    );
}
