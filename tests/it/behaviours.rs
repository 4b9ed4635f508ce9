//! Worker behaviours of SPEC §11 (Z4-Z12) against the scripted Compute Driver: the work's
//! state and code, attempt evidence, audit rows, the exact event fields and the exact driver
//! calls.

use crate::agent::{active, audits, evidence, fixture, stop, work, Fixture};
use crate::scripted::{
    ns_observation, quiet, run_captured, run_until, run_with, Opts, Prepare, ScriptedDriver,
};
use crate::support::LoggedOutput;
use crate::support::TestDb;
use occ_worker::compute::{
    ComputeError, FailureClass, PrepareDiagnostic, RequestDiagnostic, RuntimeCredentials,
};
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn key(rev: &str) -> String {
    format!("agent_revision:{rev}:reconcile")
}

/// An event without its timestamp.
fn fields(mut event: Value) -> Value {
    event.as_object_mut().unwrap().remove("at");
    event
}

/// The events named `name` about the work `key`, without timestamps.
fn about(events: &crate::support::Captured, name: &str, key: &str) -> Vec<Value> {
    events
        .named(name)
        .into_iter()
        .filter(|e| e["workId"] == key)
        .map(fields)
        .collect()
}

/// Deploys revision 1 and runs it active; the driver's calls are forgotten.
fn deployed(f: &Fixture, driver: &Arc<ScriptedDriver>) -> String {
    let mut c = f.db.client();
    let rev = crate::agent::deploy(&mut c, &f.agent);
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(active(&mut c, &f.agent).as_deref(), Some(rev.as_str()));
    driver.clear_calls();
    rev
}

/// Whether the work `key` is queued again after `driver` made `calls` calls of `method`
/// (a deferral writes no reason code: the pass that made the call has published).
fn deferred_after(
    driver: &Arc<ScriptedDriver>,
    method: &'static str,
    calls: usize,
    key: &str,
) -> impl Fn(&mut Client) -> bool {
    let (driver, key) = (driver.clone(), key.to_string());
    move |c| {
        driver.calls_of(method).len() >= calls
            && c.query_opt(
                "SELECT 1 FROM occ.work_status WHERE idempotency_key = $1 AND state = 'queued'",
                &[&key],
            )
            .unwrap()
            .is_some()
    }
}

/// Admits a deployment with one Secret binding `TOKEN` → Secret `tok`.
fn deploy_with_binding(c: &mut Client, f: &Fixture) -> String {
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ($1, 'agent-operator', 'resource', 'ns1', 'secret', 'tok')",
        &[&f.principal],
    )
    .unwrap();
    let v: Value = crate::support::one(
        c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'scripted', 'scripted',
               '{\"TOKEN\": {\"namespaceId\": \"ns1\", \"id\": \"tok\"}}')",
        &[&f.agent],
    );
    v["revisionId"].as_str().unwrap().to_string()
}

#[test]
fn z4_secrets_of_another_secret_driver_and_a_changed_selection_are_refused_before_any_effect() {
    // SPEC Z4 (seed 004 5284-5346). Admission froze the selected driver; a Secret counts only
    // when that driver owns it, and a revision frozen with another driver is a mismatch.
    let f = fixture();
    let mut c = f.db.client();
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.secret_create('ns1', 'tok', 'ns1/tok/value', 'admin', 'vault', 'uid-1')",
        &[],
    );
    assert_eq!(
        v,
        json!({"namespaceId": "ns1", "id": "tok", "backendRef": "ns1/tok/value",
               "driverId": "vault", "uid": "uid-1"})
    );
    let frozen: (Option<String>, Value) = {
        let rev = deploy_with_binding(&mut c, &f);
        crate::support::row2(
            &mut c,
            "SELECT secret_driver_id, harness_auth FROM occ.agent_revisions WHERE id = $1",
            &[&rev],
        )
    };
    assert_eq!(frozen.0.as_deref(), Some("occ-secrets"));
    assert_eq!(frozen.1["secretDriverId"], "occ-secrets");
    let driver = Arc::new(ScriptedDriver::new());
    run_until(&f.db, driver.clone(), quiet);
    let first = c
        .query_one(
            "SELECT id FROM occ.agent_revisions WHERE agent_id = $1 AND revision = 1",
            &[&f.agent],
        )
        .unwrap()
        .get::<_, String>(0);
    let (state, code, _, attempts) = work(&mut c, &key(&first));
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        ("failed_permanent", Some("SECRET_BINDING_UNAVAILABLE"), 1)
    );

    // The Secret now belongs to the selected driver, but the Installation selects another one
    // since admission: both the binding and the `secret` harness auth are mismatches.
    c.execute(
        "UPDATE occ.secrets SET driver_id = 'occ-secrets' WHERE id = 'tok'",
        &[],
    )
    .unwrap();
    let second = deploy_with_binding_again(&mut c, &f);
    c.execute(
        "UPDATE occ.installation SET secret_driver_id = 'vault'",
        &[],
    )
    .unwrap();
    run_until(&f.db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &key(&second)).failed_with("SECRET_DRIVER_MISMATCH");
    // No selection at all: a revision without bindings but with `secret` harness auth is a
    // mismatch too.
    c.execute("UPDATE occ.installation SET secret_driver_id = NULL", &[])
        .unwrap();
    let third = crate::agent::deploy(&mut c, &f.agent);
    run_until(&f.db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &key(&third)).failed_with("SECRET_DRIVER_MISMATCH");
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    // Refusals other than denials are not audited (seed 004 5916-5922).
    assert!(audits(&mut c, "openclaw.agents.deploy").is_empty());
    assert_eq!(active(&mut c, &f.agent), None);
}

fn deploy_with_binding_again(c: &mut Client, f: &Fixture) -> String {
    let v: Value = crate::support::one(
        c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'scripted', 'scripted',
               '{\"TOKEN\": {\"namespaceId\": \"ns1\", \"id\": \"tok\"}}')",
        &[&f.agent],
    );
    v["revisionId"].as_str().unwrap().to_string()
}

#[test]
fn z4_start_up_refuses_a_secret_driver_the_installation_does_not_select() {
    // SPEC Z4 (seed 004 1271-1282): one line naming the variable, exit 2, before Compute.
    let db = TestDb::bootstrapped();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_occ-worker"))
        .args(["check"])
        .env("OCC_DATABASE_URL", &db.url)
        .env("OCC_COMPUTE_DRIVER", "docker")
        .env("OCC_SECRET_DRIVER", "vault")
        .logged_output("behaviours.occ-worker")
        .unwrap();
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stderr).as_ref()),
        (
            Some(2),
            "occ-worker: invalid configuration: OCC_SECRET_DRIVER is \"vault\" but the Installation selects Secret Driver \"occ-secrets\"\n"
        )
    );
}

#[test]
fn z5_a_draining_stop_defers_on_its_cadence_and_logs_its_first_yield_then_its_end() {
    // SPEC Z5 (seed 004 2701-2732, 3085-3125): before the work reaches the convergence
    // deadline the recheck is 1 s growing with age to 5 s, the attempt is refunded, no evidence
    // is recorded, and `worker.completed` says the first yield, then (within a minute) only the
    // outcome, with the yield count. (Past the deadline the stop retries within its budget:
    // agent::a1_a_stop_that_never_drains_fails_within_the_budget_past_the_deadline.)
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    driver.fail(
        "stop_revision",
        &rev,
        ComputeError::draining("kubernetes_pods_terminating"),
    );
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    let opts = Opts::default();
    run_with(
        &f.db,
        driver.clone(),
        opts,
        deferred_after(&driver, "stop_revision", 1, &key),
    );
    let (attempts, recheck_ms): (i32, f64) = {
        let r = c
            .query_one(
                "SELECT attempt_count, extract(epoch FROM available_at - updated_at)::float8 * 1000
                 FROM occ.work_status WHERE idempotency_key = $1",
                &[&key],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(attempts, 0, "the yield refunded its attempt");
    assert!((1000.0..=5000.0).contains(&recheck_ms), "{recheck_ms}");
    assert!(evidence(&mut c, &key).is_empty());

    for _ in 0..2 {
        driver.fail(
            "stop_revision",
            &rev,
            ComputeError::draining("kubernetes_pods_terminating"),
        );
    }
    let events = run_captured(&f.db, driver.clone(), opts, quiet);
    let (state, code, _, attempts) = work(&mut c, &key);
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        ("succeeded", Some("AGENT_STOPPED"), 1)
    );
    assert_eq!(evidence(&mut c, &key), vec!["succeeded:AGENT_STOPPED"]);
    assert_eq!(
        driver.log(),
        [
            "bind_agent:bot",
            "stop_revision:r1",
            "bind_agent:bot",
            "stop_revision:r1",
            "bind_agent:bot",
            "stop_revision:r1",
            "bind_agent:bot",
            "stop_revision:r1",
        ]
        .map(|s| s.replace("bot", &f.agent).replace("r1", &rev))
    );
    let completed: Vec<Value> = about(&events, "worker.completed", &key)
        .into_iter()
        .map(|mut e| {
            e.as_object_mut().unwrap().remove("timings");
            e
        })
        .collect();
    let base = json!({"event": "worker.completed", "workId": key, "operation": "agent.stop", "namespaceId": "ns1",
                      "agentId": f.agent});
    let with = |extra: Value| {
        let mut e = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        e
    };
    assert_eq!(
        completed,
        vec![
            with(
                json!({"attempt": 1, "result": "pending", "outcome": "pending",
                        "code": "AGENT_STOP_YIELDED", "cause": "kubernetes_pods_terminating",
                        "stopYields": 1})
            ),
            with(
                json!({"attempt": 1, "result": "success", "outcome": "success",
                        "code": "AGENT_STOPPED", "stopYields": 2})
            ),
        ]
    );
    assert_eq!(about(&events, "worker.pass-error", &key).len(), 1);
    let a = audits(&mut c, "openclaw.agents.lifecycle.stop");
    assert_eq!(
        a,
        vec![(
            "mutation".into(),
            "success".into(),
            Some("AGENT_STOPPED".into()),
            f.agent.clone()
        )]
    );
}

#[test]
fn z5_a_deployment_that_fails_after_yielding_its_predecessor_stop_finishes_it_first() {
    // SPEC Z5 (seed 004 1932-1940, 6104-6158): an exclusive candidate yields while its
    // predecessor drains; refused later, it stops the predecessor again before failing, and a
    // stop that fails is named `predecessorStop`.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver {
        exclusive: true,
        ..ScriptedDriver::default()
    });
    let first = deployed(&f, &driver);
    let mut c = f.db.client();
    let second = crate::agent::deploy(&mut c, &f.agent);
    driver.fail(
        "stop_revision",
        &first,
        ComputeError::draining("kubernetes_pods_terminating"),
    );
    run_until(
        &f.db,
        driver.clone(),
        deferred_after(&driver, "stop_revision", 1, &key(&second)),
    );
    assert_eq!(
        driver.log(),
        [
            format!("bind_agent:{}", f.agent),
            format!("stop_revision:{first}")
        ]
    );
    // The first yield is the evidence a later pass finishes the stop by.
    assert_eq!(
        evidence(&mut c, &key(&second)),
        vec!["deferred:PREDECESSOR_STOP_YIELDED"]
    );
    driver.clear_calls();
    // A version approved since admission refuses the candidate (R2) before any effect.
    c.execute(
        "UPDATE occ.approved_harnesses SET version = '1.0.1' WHERE harness_id = 'codex' AND mode = 'dedicated'",
        &[],
    )
    .unwrap();
    driver.fail(
        "stop_revision",
        &first,
        ComputeError::retryable("scripted_stop", Some(503)).with_reason("ServiceUnavailable"),
    );
    let events = run_captured(&f.db, driver.clone(), Opts::default(), quiet);
    let (state, code, _, _) = work(&mut c, &key(&second));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("HARNESS_DESCRIPTOR_MISMATCH"))
    );
    assert_eq!(driver.log(), [format!("stop_revision:{first}")]);
    let completed = about(&events, "worker.completed", &key(&second));
    assert_eq!(completed.len(), 1, "{completed:?}");
    let e = &completed[0];
    assert_eq!(
        (&e["outcome"], &e["code"], &e["predecessorStop"]),
        (
            &json!("permanent"),
            &json!("HARNESS_DESCRIPTOR_MISMATCH"),
            &json!("scripted_stop")
        ),
        "{e}"
    );
    assert_eq!(active(&mut c, &f.agent).as_deref(), Some(first.as_str()));
}

#[test]
fn z6_a_valid_prepare_failure_diagnostic_is_emitted_and_an_invalid_one_is_not() {
    // SPEC Z6 (seed 004 835-862, 1865-1897): it never changes the outcome.
    let f = fixture();
    let mut c = f.db.client();
    let rev = crate::agent::deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    let valid = PrepareDiagnostic {
        error_class: Some("QuotaError".into()),
        message: Some("the namespace quota allows 2 pods".into()),
        status: Some(403),
        ..PrepareDiagnostic::new("POD_QUOTA", "create_deployment")
    };
    let invalid = [
        PrepareDiagnostic::new("pod quota", "create_deployment"),
        PrepareDiagnostic::new("POD_QUOTA", "Create"),
        PrepareDiagnostic {
            message: Some("line\nbreak".into()),
            ..PrepareDiagnostic::new("POD_QUOTA", "create")
        },
        PrepareDiagnostic {
            message: Some("x".repeat(257)),
            ..PrepareDiagnostic::new("POD_QUOTA", "create")
        },
        PrepareDiagnostic {
            status: Some(1000),
            ..PrepareDiagnostic::new("POD_QUOTA", "create")
        },
    ];
    let mut script = vec![Prepare::Fail(
        ComputeError::retryable("scripted", Some(403)).with_diagnostic(valid),
    )];
    let invalid_count = invalid.len();
    script.extend(
        invalid.into_iter().map(|d| {
            Prepare::Fail(ComputeError::transient("scripted", Some(503)).with_diagnostic(d))
        }),
    );
    driver.script_prepare(&rev, script);
    let opts = Opts {
        timeout: Duration::from_secs(60),
        ..Opts::default()
    };
    let events = run_captured(&f.db, driver.clone(), opts, quiet);
    let (state, code, _, attempts) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        ("succeeded", Some("REVISION_ACTIVATED"), 2),
        "one retry spent an attempt; the transient waits refunded theirs"
    );
    assert_eq!(
        driver.calls_of("prepare_revision").len(),
        1 + invalid_count + 1
    );
    let described: Vec<Value> = events
        .named("worker.compute-prepare-failed")
        .into_iter()
        .map(fields)
        .collect();
    assert_eq!(
        described,
        vec![json!({
            "event": "worker.compute-prepare-failed",
            "workId": key(&rev),
            "attempt": 1,
            "operation": "agent_revision.reconcile",
            "namespaceId": "ns1",
            "agentId": f.agent,
            "revisionId": rev,
            "computeDriverId": "scripted",
            "code": "POD_QUOTA",
            "step": "create_deployment",
            "candidatePreparationReached": true,
            "errorClass": "QuotaError",
            "message": "the namespace quota allows 2 pods",
            "status": 403,
        })]
    );
}

#[test]
fn z7_worker_health_follows_every_claimed_pass_and_is_otherwise_throttled() {
    // SPEC Z7 (seed 004 1594-1616): counted against passes, not timed.
    let f = fixture();
    let mut c = f.db.client();
    let rev = crate::agent::deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        vec![Prepare::Pending("WORKLOAD_UNSCHEDULABLE"), Prepare::Ready],
    );
    let opts = Opts {
        concurrency: 1,
        ..Opts::default()
    };
    let started = std::time::Instant::now();
    let events = run_captured(&f.db, driver, opts, quiet);
    let ran = started.elapsed();
    let passes = events.named("worker.completed").len();
    assert_eq!(passes, 2);
    let health = events.named("worker.health");
    for h in &health {
        assert_eq!(h["status"], "ready", "{h}");
        assert!(h["pending"].as_i64().is_some_and(|n| n >= 0), "{h}");
    }
    // One after each pass; the idle ones at most one per second of the run (poll 25 ms:
    // max(1000 ms, 20 × 25 ms)).
    let idle_bound = ran.as_secs() as usize + 1;
    assert!(
        health.len() >= passes && health.len() <= passes + idle_bound,
        "{} health lines for {passes} passes in {ran:?}",
        health.len()
    );
    // With one worker thread, each pass's line follows its `worker.completed` (a
    // `worker.stopping` may come between them once the queue is quiet).
    let names: Vec<String> = events
        .events()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    for (i, name) in names.iter().enumerate() {
        if name == "worker.completed" {
            assert!(
                names[i + 1..].iter().take(2).any(|n| n == "worker.health"),
                "{names:?}"
            );
        }
    }
}

#[test]
fn z9_a_revisions_reconcile_key_reports_its_deploy_timings() {
    // SPEC Z9 (seed 004 823-834, 4118-4172): phases added up over the passes of one
    // deployment; only the revision's own reconcile key carries them.
    let f = fixture();
    let mut c = f.db.client();
    let rev = crate::agent::deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        vec![Prepare::Pending("WORKLOAD_UNSCHEDULABLE"), Prepare::Ready],
    );
    let events = run_captured(&f.db, driver.clone(), Opts::default(), quiet);
    let (state, code, _, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("succeeded", Some("REVISION_ACTIVATED"))
    );
    assert_eq!(
        driver.log(),
        [
            format!("bind_agent:{}", f.agent),
            format!("prepare_revision:{rev}"),
            format!("bind_agent:{}", f.agent),
            format!("prepare_revision:{rev}"),
            format!("activate_revision:{rev}"),
        ]
    );
    let completed = about(&events, "worker.completed", &key(&rev));
    assert_eq!(completed.len(), 2);
    let timing_keys = |e: &Value| {
        let mut k: Vec<&str> = [
            "durationMs",
            "deployPasses",
            "prepareMs",
            "readinessWaitMs",
            "activationMs",
            "elapsedMs",
        ]
        .into_iter()
        .filter(|k| e.get(*k).is_some_and(Value::is_u64))
        .collect();
        k.sort();
        k
    };
    assert_eq!(
        (&completed[0]["code"], &completed[0]["deployPasses"]),
        (&json!("REVISION_UNSCHEDULABLE"), &json!(1))
    );
    assert_eq!(
        timing_keys(&completed[0]),
        [
            "deployPasses",
            "durationMs",
            "elapsedMs",
            "prepareMs",
            "readinessWaitMs"
        ]
    );
    assert_eq!(
        (&completed[1]["code"], &completed[1]["deployPasses"]),
        (&json!("REVISION_ACTIVATED"), &json!(2))
    );
    assert_eq!(
        timing_keys(&completed[1]),
        [
            "activationMs",
            "deployPasses",
            "durationMs",
            "elapsedMs",
            "prepareMs",
            "readinessWaitMs"
        ]
    );
    // The database-clock age covers the first pass's recheck (at least 500 ms).
    assert!(completed[1]["elapsedMs"].as_u64().unwrap() >= 500);
    // Stop work is no deployment.
    let stop_key = stop(&mut c, &f.agent, "admin");
    let events = run_captured(&f.db, driver, Opts::default(), quiet);
    let stopped = about(&events, "worker.completed", &stop_key);
    assert_eq!(stopped.len(), 1);
    assert!(timing_keys(&stopped[0]).is_empty(), "{}", stopped[0]);
}

#[test]
fn z10_a_failed_namespace_ensure_says_the_drivers_printable_reason_on_completed_only() {
    // SPEC Z10 (seed 004 952-958, 6915-6929).
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for ns in ["said", "unsaid"] {
        c.query_one("SELECT occ.namespace_create('admin', $1)", &[&ns])
            .unwrap();
    }
    let driver = Arc::new(ScriptedDriver::new());
    driver.ensure_namespace.default_to(|spec| {
        let mut o = ns_observation(spec, false, Some(FailureClass::Permanent), None);
        o.reason = Some(if spec.name == "said" {
            "quota exceeded: 3 namespaces per tenant".into()
        } else {
            "bell\u{7}".into()
        });
        Ok(o)
    });
    let events = run_captured(&db, driver.clone(), Opts::default(), quiet);
    let mut reasons = Vec::new();
    for ns in ["said", "unsaid"] {
        let (id, status): (String, String) = {
            let r = c
                .query_one(
                    "SELECT id, status FROM occ.namespaces_all WHERE name = $1",
                    &[&ns],
                )
                .unwrap();
            (r.get(0), r.get(1))
        };
        assert_eq!(status, "failed");
        let key = format!("namespace:{id}:ensure");
        crate::support::expect_work(&mut c, &key).failed_with("NAMESPACE_INCOMPLETE");
        let completed = about(&events, "worker.completed", &key);
        assert_eq!(completed.len(), 1);
        reasons.push(completed[0].get("reason").cloned());
        // The audit keeps the class, never the driver's words.
        let details: Value = crate::support::one(
            &mut c,
            "SELECT details FROM occ.audit_events WHERE namespace_id = $1 AND action LIKE '%lifecycle%' ORDER BY id DESC LIMIT 1",
            &[&id],
        );
        assert_eq!(details["failure"], "permanent", "{details}");
        assert!(!details.to_string().contains("quota"), "{details}");
    }
    assert_eq!(
        reasons,
        [Some(json!("quota exceeded: 3 namespaces per tenant")), None]
    );
}

#[test]
fn z11_deleting_an_agent_on_a_compute_that_cannot_delete_its_credentials_fails_before_any_effect() {
    // SPEC Z11 (seed 004 2817-2828).
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    deployed(&f, &driver);
    let mut c = f.db.client();
    crate::agent::stop(&mut c, &f.agent, "admin");
    run_until(&f.db, driver.clone(), quiet);
    driver.clear_calls();
    c.execute("SELECT occ.agent_delete('ns1', $1, 'admin')", &[&f.agent])
        .unwrap();
    let cannot_delete = Arc::new(ScriptedDriver {
        credentials: RuntimeCredentials::ProvisionedOnly,
        ..ScriptedDriver::default()
    });
    run_until(&f.db, cannot_delete.clone(), quiet);
    let key = format!("agent:{}:delete", f.agent);
    let (state, code, _, attempts) = work(&mut c, &key);
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        (
            "failed_permanent",
            Some("CREDENTIAL_DELETION_UNSUPPORTED"),
            1
        )
    );
    assert!(
        cannot_delete.calls().is_empty(),
        "{:?}",
        cannot_delete.log()
    );
    assert_eq!(
        audits(&mut c, "openclaw.agents.lifecycle.delete"),
        vec![(
            "mutation".into(),
            "failure".into(),
            Some("CREDENTIAL_DELETION_UNSUPPORTED".into()),
            f.agent.clone()
        )]
    );
    let agents: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.agents WHERE id = $1",
        &[&f.agent],
    );
    assert_eq!(agents, 1);
}

#[test]
fn z12_ended_passes_carry_their_failure_fields() {
    // SPEC Z12 (seed 004 258-397): a transient dependency names itself and its cause; a
    // permanent failure its class, status, Status reason, request diagnostic and failed
    // cleanup.
    let f = fixture();
    let mut c = f.db.client();
    let rev = crate::agent::deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    let request = RequestDiagnostic {
        method: Some("CreateSandbox".into()),
        grpc_status: Some(3),
        validation_category: Some("image_reference".into()),
    };
    driver.script_prepare(
        &rev,
        vec![
            Prepare::Fail(
                ComputeError::transient("kubernetes_unavailable", Some(503))
                    .with_reason("ServiceUnavailable"),
            ),
            Prepare::Fail(
                ComputeError::permanent("REVISION_ROLLOUT_FAILED", "kubernetes", Some(422))
                    .with_reason("Invalid")
                    .with_request(request)
                    .with_failed_cleanup("kubernetes_delete"),
            ),
        ],
    );
    let events = run_captured(&f.db, driver, Opts::default(), quiet);
    let (state, code, _, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("REVISION_ROLLOUT_FAILED"))
    );
    let failure = |e: &Value| {
        let keep = [
            "outcome",
            "code",
            "dependency",
            "cause",
            "status",
            "reason",
            "method",
            "grpcStatus",
            "validationCategory",
            "cleanupCause",
            "refusal",
            "predecessorStop",
        ];
        Value::Object(
            e.as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| keep.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    let completed: Vec<Value> = about(&events, "worker.completed", &key(&rev))
        .iter()
        .map(failure)
        .collect();
    assert_eq!(
        completed,
        vec![
            json!({"outcome": "pending", "code": "DEPENDENCY_UNAVAILABLE", "dependency": "scripted",
                   "cause": "kubernetes_unavailable", "status": 503, "reason": "ServiceUnavailable"}),
            json!({"outcome": "permanent", "code": "REVISION_ROLLOUT_FAILED",
                   "cause": "kubernetes", "status": 422, "reason": "Invalid",
                   "method": "CreateSandbox", "grpcStatus": 3,
                   "validationCategory": "image_reference", "cleanupCause": "kubernetes_delete"}),
        ]
    );
}

#[test]
fn z10_namespace_reasons_need_a_failure() {
    // A pending observation's reason is not a failure reason (SPEC Z10: "has a failure").
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    c.query_one("SELECT occ.namespace_create('admin', 'later')", &[])
        .unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    driver.ensure_namespace.then(|spec| {
        let mut o = ns_observation(spec, false, None, None);
        o.reason = Some("still waiting".into());
        Ok(o)
    });
    let events = run_captured(&db, driver, Opts::default(), quiet);
    let completed: Vec<Value> = events
        .named("worker.completed")
        .into_iter()
        .filter(|e| e["operation"] == "namespace.ensure")
        .collect();
    assert_eq!(completed.len(), 2, "{completed:?}");
    assert_eq!(completed[1]["code"], "NAMESPACE_RECONCILED");
    assert!(completed.iter().all(|e| e.get("reason").is_none()));
}

#[test]
fn z4_admin_secret_create_names_the_owning_driver_and_backend_uid() {
    // SPEC Z4: `--driver` and `--backend-uid`; a bad uid is bad input naming the flag.
    let db = TestDb::bootstrapped();
    crate::support::insert_namespace(&mut db.client(), "ns1", "ready");
    let created = crate::agent::cli(
        &db,
        &[
            "admin",
            "secret",
            "create",
            "ns1",
            "tok",
            "--backend-ref",
            "ns1/tok/value",
            "--driver",
            "vault",
            "--backend-uid",
            "6f1c2a10-0b1e-4c7e-9d2a-3a4b5c6d7e8f",
            "--actor",
            "admin",
        ],
    );
    assert_eq!(
        created,
        json!({"namespaceId": "ns1", "id": "tok", "backendRef": "ns1/tok/value",
               "driverId": "vault", "uid": "6f1c2a10-0b1e-4c7e-9d2a-3a4b5c6d7e8f"})
    );
    let defaulted = crate::agent::cli(
        &db,
        &[
            "admin",
            "secret",
            "create",
            "ns1",
            "key",
            "--backend-ref",
            "ns1/key/value",
            "--actor",
            "admin",
        ],
    );
    assert_eq!(defaulted["driverId"], "occ-secrets");
    assert!(defaulted["uid"].as_str().is_some_and(|u| u.len() == 36));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_occ-worker"))
        .args(["--database-url", &db.url])
        .args([
            "admin",
            "secret",
            "create",
            "ns1",
            "bad",
            "--backend-ref",
            "ns1/bad/value",
            "--backend-uid",
            " spaced",
            "--actor",
            "admin",
        ])
        .logged_output("behaviours.occ-worker")
        .unwrap();
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stderr).as_ref()),
        (
            Some(2),
            "occ-worker: secret create refused: --backend-uid must be 1 to 128 letters, digits, -, ., _ and :, starting with a letter or digit, got \" spaced\"\n"
        )
    );
}

#[test]
fn z5_a_failing_deployment_waits_for_its_yielded_predecessors_drain() {
    // SPEC Z5 (seed 004 6104-6158, "drain wait"): a deployment that ends failed waits, bounded,
    // for the predecessor stop it yielded, so the predecessor ends stopped.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver {
        exclusive: true,
        ..ScriptedDriver::default()
    });
    let first = deployed(&f, &driver);
    let mut c = f.db.client();
    let second = crate::agent::deploy(&mut c, &f.agent);
    let draining = || ComputeError::draining("kubernetes_pods_terminating");
    driver.fail("stop_revision", &first, draining());
    run_until(
        &f.db,
        driver.clone(),
        deferred_after(&driver, "stop_revision", 1, &key(&second)),
    );
    driver.clear_calls();
    c.execute(
        "UPDATE occ.approved_harnesses SET version = '1.0.1' WHERE harness_id = 'codex' AND mode = 'dedicated'",
        &[],
    )
    .unwrap();
    driver.fail("stop_revision", &first, draining());
    driver.fail("stop_revision", &first, draining());
    let events = run_captured(&f.db, driver.clone(), Opts::default(), quiet);
    crate::support::expect_work(&mut c, &key(&second)).failed_with("HARNESS_DESCRIPTOR_MISMATCH");
    assert_eq!(driver.log(), vec![format!("stop_revision:{first}"); 3]);
    let completed = about(&events, "worker.completed", &key(&second));
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert_eq!(completed[0]["outcome"], "permanent");
    assert!(
        completed[0].get("predecessorStop").is_none(),
        "{}",
        completed[0]
    );
}

#[test]
fn w7x_worker_completed_names_the_operation_as_the_seed_does() {
    // SPEC W7x (seed 004 801-821): the seed's dotted names, a maintenance key under its
    // revision's reconciliation; `work.operation` keeps its own.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_millis(200)),
        ..ScriptedDriver::default()
    });
    let rev = crate::agent::deploy(&mut f.db.client(), &f.agent);
    let maintained = |c: &mut Client| {
        c.query_one(
            "SELECT count(*) FROM occ.work_status WHERE operation = 'revision_maintenance' AND state = 'succeeded'",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0)
            > 0
    };
    let events = run_captured(&f.db, driver.clone(), Opts::default(), maintained);
    let operations = |name: &str| -> Vec<String> {
        events
            .named("worker.completed")
            .into_iter()
            .filter(|e| e["workId"].as_str().is_some_and(|k| k.starts_with(name)))
            .map(|e| e["operation"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(operations(&key(&rev)), ["agent_revision.reconcile"]);
    let maintenance = operations(&format!("agent_revision:{rev}:maintenance:"));
    assert!(!maintenance.is_empty());
    assert!(maintenance.iter().all(|o| o == "agent_revision.reconcile"));
    let mut c = f.db.client();
    let stop_key = stop(&mut c, &f.agent, "admin");
    let events = run_captured(&f.db, driver, Opts::default(), quiet);
    let stopped = about(&events, "worker.completed", &stop_key);
    assert_eq!(stopped.last().unwrap()["operation"], "agent.stop");
    let column: String = crate::support::one(
        &mut c,
        "SELECT operation FROM occ.work WHERE idempotency_key = $1",
        &[&stop_key],
    );
    assert_eq!(column, "agent_stop");
}

#[test]
fn z8_a_denied_stop_and_deletion_carry_a_hint_and_nothing_else_does() {
    // SPEC Z8 (seed 004 702-712): `hintCode` on the permanent outcome of a mapped code of an
    // Agent stop or deletion, and on nothing else.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    deployed(&f, &driver);
    let mut c = f.db.client();
    crate::agent::user(&mut c, "bob", "namespace-admin");
    let stop_key = stop(&mut c, &f.agent, "bob");
    c.execute("SELECT occ.agent_delete('ns1', $1, 'bob')", &[&f.agent])
        .unwrap();
    c.execute(
        "DELETE FROM occ.iam_bindings WHERE principal_id = 'bob'",
        &[],
    )
    .unwrap();
    let events = run_captured(&f.db, driver, Opts::default(), quiet);
    let delete_key = format!("agent:{}:delete", f.agent);
    for (key, operation) in [(&stop_key, "agent.stop"), (&delete_key, "agent.delete")] {
        let done = about(&events, "worker.completed", key);
        let last = done.last().unwrap();
        assert_eq!(
            (
                &last["operation"],
                &last["outcome"],
                &last["code"],
                &last["hintCode"]
            ),
            (
                &json!(operation),
                &json!("permanent"),
                &json!("AUTHORIZATION_DENIED"),
                &json!("GRANT_AND_REPLAY")
            ),
            "{last}"
        );
        assert_eq!(work(&mut c, key).1.as_deref(), Some("AUTHORIZATION_DENIED"));
        // `admin work show` says it as a sentence.
        let shown = occ_worker::queue::work_show(&mut c, key).unwrap().unwrap();
        assert_eq!(shown.hint_code, Some("GRANT_AND_REPLAY"));
        assert_eq!(
            shown.hint,
            Some("grant the actor the permission it lacked, then run the same command again")
        );
    }
    let deployed_work = occ_worker::queue::work_list(
        &mut c,
        &occ_worker::queue::WorkFilter {
            limit: 100,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(deployed_work
        .iter()
        .filter(|w| w.key != stop_key && w.key != delete_key)
        .all(|w| w.hint.is_none()));
    // Every other completion (the deployment's, every success) carries none.
    let hinted: Vec<Value> = events
        .named("worker.completed")
        .into_iter()
        .filter(|e| e.get("hintCode").is_some())
        .collect();
    assert_eq!(hinted.len(), 2, "{hinted:?}");
}
