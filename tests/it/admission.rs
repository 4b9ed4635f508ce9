//! Execution admission and failed-preparation retirement (SPEC §16: Z1, Z3) with a real worker
//! and the scripted driver: the stored admission's shape, its refusal of a candidate, the
//! active revision's withdrawal or SPEC Z2's active path, a failed preparation published at
//! once with its repository cleanup registered (SPEC G2), and the deadline's retirement of a
//! bootstrap-pending candidate by that cleanup.

use crate::agent::{active, deploy, evidence, fixture, work};
use crate::revision::{ended, key, maintenance_work, requeue, run};
use crate::scripted::{quiet, run_until, run_with, Opts, Prepare, ScriptedDriver};
use crate::support::scalar;
use occ_worker::compute::{ComputeError, ExecutionAdmission};
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// Rewrites a stored revision's execution admission, as a revision admitted by another
/// release would hold it: revisions are immutable, so the guard trigger is bypassed for this
/// one statement (CHECK constraints still apply).
fn store_admission(c: &mut Client, rev: &str, admission: Value) -> Result<u64, postgres::Error> {
    let mut tx = c.transaction().unwrap();
    tx.batch_execute("SET LOCAL session_replication_role = replica")
        .unwrap();
    let n = tx.execute(
        "UPDATE occ.agent_revisions SET execution_admission = $2 WHERE id = $1",
        &[&rev, &admission],
    )?;
    tx.commit().unwrap();
    Ok(n)
}

fn protected() -> ExecutionAdmission {
    ExecutionAdmission {
        version: 6,
        mode: "protected".into(),
    }
}

fn calls(driver: &ScriptedDriver) -> Vec<String> {
    driver.log()
}

#[test]
fn z1_every_revision_is_admitted_as_version_5_standard_and_the_shape_is_checked() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let stored: Value = crate::support::one(
        &mut c,
        "SELECT execution_admission FROM occ.agent_revisions WHERE id = $1",
        &[&rev],
    );
    assert_eq!(stored, json!({"version": 5, "mode": "standard"}));
    for bad in [
        json!({"version": 0, "mode": "standard"}),
        json!({"version": -1, "mode": "standard"}),
        json!({"version": 5.5, "mode": "standard"}),
        json!({"version": "5", "mode": "standard"}),
        json!({"version": 5, "mode": "Standard"}),
        json!({"version": 5, "mode": "_standard"}),
        json!({"version": 5, "mode": "a".repeat(33)}),
        json!({"version": 5}),
        json!({"version": 5, "mode": "standard", "egress": true}),
        json!([5, "standard"]),
    ] {
        let e = store_admission(&mut c, &rev, bad.clone()).unwrap_err();
        let db = e.as_db_error().expect("a database error");
        assert_eq!(
            db.constraint(),
            Some("agent_revisions_execution_admission_check"),
            "{bad}"
        );
    }
    assert_eq!(
        store_admission(&mut c, &rev, json!({"version": 6, "mode": "protected"})).unwrap(),
        1
    );
}

#[test]
fn z1_a_refused_admission_ends_a_fresh_candidate_before_any_compute_call() {
    // The driver's list refuses the stored pair; the worker's own check refuses any other
    // than {5, standard}. Either way the candidate fails for good with no Compute call.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.run_admissions(vec![protected()]);
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("EXECUTION_ADMISSION_UNAVAILABLE");
    assert!(calls(&driver).is_empty(), "{:?}", calls(&driver));
    assert_eq!(active(&mut c, &f.agent), None);

    let rev = deploy(&mut c, &f.agent);
    store_admission(&mut c, &rev, json!({"version": 4, "mode": "standard"})).unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("EXECUTION_ADMISSION_UNAVAILABLE");
    assert!(calls(&driver).is_empty(), "{:?}", calls(&driver));

    // A driver that runs the stored pair deploys it.
    let rev = deploy(&mut c, &f.agent);
    store_admission(&mut c, &rev, json!({"version": 6, "mode": "protected"})).unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    driver.run_admissions(vec![protected()]);
    run(&f, &driver);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
}

#[test]
fn z1_an_admission_refused_before_preparation_is_that_calls_error_and_stops_the_candidate() {
    // Decided again before prepare_revision: refused after the Secret step (here, while the
    // Agent's objects are bound), the candidate never prepares, fails for good and is stopped
    // as a refused candidate (R9).
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    let weak = Arc::downgrade(&driver);
    driver.on_call(move |method, _| {
        if method == "bind_agent" {
            weak.upgrade().unwrap().run_admissions(vec![]);
        }
    });
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("EXECUTION_ADMISSION_UNAVAILABLE");
    assert!(driver.calls_of("prepare_revision").is_empty());
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone()]);
    assert_eq!(active(&mut c, &f.agent), None);
}

/// An active revision of `f`'s Agent whose reconcile work is queued again, and a driver that
/// no longer runs its execution admission.
fn refused_active(f: &crate::agent::Fixture, withdrawal: bool) -> (String, Arc<ScriptedDriver>) {
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    run(f, &Arc::new(ScriptedDriver::new()));
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    requeue(&mut c, &key(&rev));
    let driver = Arc::new(ScriptedDriver {
        withdrawal,
        ..ScriptedDriver::default()
    });
    driver.run_admissions(vec![]);
    (rev, driver)
}

#[test]
fn z1_a_withdrawal_that_works_ends_the_active_revision_withdrawn_without_a_refused_candidate_stop()
{
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = refused_active(&f, true);
    run(&f, &driver);
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("EXECUTION_ADMISSION_WITHDRAWN");
    // The withdrawal is the only call: no binding, no refused-candidate stop.
    assert_eq!(
        calls(&driver),
        vec![format!("withdraw_rejected_execution:{rev}")]
    );
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn z1_a_withdrawal_that_fails_stays_pending_past_the_deadline_until_it_works() {
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = refused_active(&f, true);
    for _ in 0..3 {
        driver.fail(
            "withdraw_rejected_execution",
            &rev,
            ComputeError::draining("scripted"),
        );
    }
    // The requeued work is far past this deadline from its first pass on.
    let opts = Opts {
        convergence: Duration::from_millis(1),
        ..Opts::default()
    };
    let k = key(&rev);
    run_with(&f.db, driver.clone(), opts, |c| ended(c, &k));
    let ev = evidence(&mut c, &k);
    assert_eq!(
        ev,
        vec![
            "succeeded:REVISION_ACTIVATED",
            "deferred:EXECUTION_ADMISSION_WITHDRAWAL_PENDING",
            "deferred:EXECUTION_ADMISSION_WITHDRAWAL_PENDING",
            "deferred:EXECUTION_ADMISSION_WITHDRAWAL_PENDING",
            "failed:EXECUTION_ADMISSION_WITHDRAWN",
        ]
    );
    assert_eq!(driver.calls_of("withdraw_rejected_execution").len(), 4);
    assert!(driver.calls_of("stop_revision").is_empty());
}

#[test]
fn z1_a_driver_without_a_withdrawal_takes_z2s_active_path() {
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = refused_active(&f, false);
    let k = key(&rev);
    run_until(&f.db, driver.clone(), |c| evidence(c, &k).len() >= 2);
    let ev = evidence(&mut c, &k);
    assert!(
        ev[1..]
            .iter()
            .all(|e| e == "deferred:EXECUTION_ADMISSION_UNAVAILABLE"),
        "{ev:?}"
    );
    assert!(calls(&driver).is_empty(), "{:?}", calls(&driver));
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
}

#[test]
fn z1_a_driver_without_a_withdrawal_fails_a_maintenance_claim_and_keeps_the_chain() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    run(&f, &Arc::new(ScriptedDriver::new()));
    let m = maintenance_work(&mut c, &f.agent, &rev);
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_millis(200)),
        ..ScriptedDriver::default()
    });
    driver.run_admissions(vec![]);
    let first = m.clone();
    run_until(&f.db, driver.clone(), move |c| ended(c, &first));
    crate::support::expect_work(&mut c, &m).failed_with("EXECUTION_ADMISSION_UNAVAILABLE");
    let buckets: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE operation = 'revision_maintenance'",
    );
    assert!(buckets >= 2, "the chain is kept");
    assert!(calls(&driver).is_empty(), "{:?}", calls(&driver));
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn z1_a_withdrawal_on_a_maintenance_key_ends_the_chain() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    run(&f, &Arc::new(ScriptedDriver::new()));
    let m = maintenance_work(&mut c, &f.agent, &rev);
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_millis(200)),
        withdrawal: true,
        ..ScriptedDriver::default()
    });
    driver.run_admissions(vec![]);
    run(&f, &driver);
    crate::support::expect_work(&mut c, &m).failed_with("EXECUTION_ADMISSION_WITHDRAWN");
    let buckets: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE operation = 'revision_maintenance'",
    );
    assert_eq!(buckets, 1, "no next bucket");
}

fn preparation_failed() -> ComputeError {
    ComputeError::preparation_failed(
        "HARNESS_PREPARATION_FAILED",
        "scripted",
        Some(json!({"stage": "seed", "status": 409})),
    )
}

/// The `failed-preparation` repository cleanup key of `rev` (SPEC G1).
fn cleanup(rev: &str) -> String {
    format!("agent_revision:{rev}:repository_cleanup:failed-preparation")
}

#[test]
fn z3_a_preparation_failure_fails_at_once_with_its_evidence_and_its_cleanup_stops_it() {
    // SPEC Z3, G2: not stopped as a refused candidate; the stop is the cleanup's, after the
    // failure is published.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Fail(preparation_failed())]);
    let url = f.db.url.clone();
    let k = key(&rev);
    let states = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let seen = states.clone();
    driver.on_call(move |method, _| {
        if method == "stop_revision" {
            let mut c = Client::connect(&url, postgres::NoTls).unwrap();
            seen.lock().push(work(&mut c, &k).0);
        }
    });
    run(&f, &driver);
    let (state, code, data, attempts) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("HARNESS_PREPARATION_FAILED"))
    );
    assert_eq!(
        data,
        Some(json!({"preparation": {"stage": "seed", "status": 409}}))
    );
    assert_eq!(attempts, 1, "permanent at once");
    assert_eq!(
        calls(&driver),
        vec![
            format!("bind_agent:{}", f.agent),
            format!("prepare_revision:{rev}"),
            format!("bind_agent:{}", f.agent),
            format!("stop_revision:{rev}"),
        ]
    );
    assert_eq!(*states.lock(), vec!["failed_permanent".to_string()]);
    assert_eq!(
        work(&mut c, &cleanup(&rev)).1.as_deref(),
        Some("REPOSITORY_CLEANUP_COMPLETE")
    );
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn z3_a_failing_cleanup_stop_never_holds_the_failure_back() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Fail(preparation_failed())]);
    driver.fail(
        "stop_revision",
        &rev,
        ComputeError::retryable("scripted", Some(500)),
    );
    let ck = cleanup(&rev);
    run_until(&f.db, driver.clone(), move |c| !evidence(c, &ck).is_empty());
    let (state, code, data, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("HARNESS_PREPARATION_FAILED"))
    );
    assert_eq!(
        evidence(&mut c, &key(&rev)),
        vec!["failed:HARNESS_PREPARATION_FAILED"]
    );
    assert_eq!(
        data,
        Some(json!({"preparation": {"stage": "seed", "status": 409}}))
    );
    assert_eq!(
        evidence(&mut c, &cleanup(&rev)),
        vec!["deferred:REPOSITORY_CLEANUP_PENDING"]
    );
    assert_eq!(driver.calls_of("prepare_revision"), vec![rev.clone()]);
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone()]);
}

const BOOTSTRAP: &str = "HARNESS_CREDENTIAL_BOOTSTRAP_PENDING";

fn deadline(ms: u64) -> Opts {
    Opts {
        convergence: Duration::from_millis(ms),
        ..Opts::default()
    }
}

#[test]
fn z3_the_deadline_stops_a_bootstrap_pending_candidate_but_not_another_pending_one() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, (0..20).map(|_| Prepare::Pending(BOOTSTRAP)).collect());
    run_with(&f.db, driver.clone(), deadline(300), quiet);
    let (state, code, data, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("CONVERGENCE_DEADLINE_EXCEEDED"))
    );
    assert_eq!(data, Some(json!({"timeoutMs": 300})));
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone()]);
    assert_eq!(
        calls(&driver).last(),
        Some(&format!("stop_revision:{rev}")),
        "stopped after the last preparation"
    );

    // Another pending reason keeps its runtime for diagnosis.
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(
        &rev,
        (0..20)
            .map(|_| Prepare::Pending("WORKLOAD_UNSCHEDULABLE"))
            .collect(),
    );
    run_with(&f.db, driver.clone(), deadline(300), quiet);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("CONVERGENCE_DEADLINE_EXCEEDED")
    );
    assert!(driver.calls_of("stop_revision").is_empty());
}

#[test]
fn z3_a_failed_deadline_cleanup_stop_never_holds_the_deadline_back() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, (0..20).map(|_| Prepare::Pending(BOOTSTRAP)).collect());
    driver.fail(
        "stop_revision",
        &rev,
        ComputeError::retryable("scripted", Some(500)),
    );
    let ck = cleanup(&rev);
    run_with(&f.db, driver.clone(), deadline(300), move |c| {
        !evidence(c, &ck).is_empty()
    });
    let k = key(&rev);
    let (state, code, data, _) = work(&mut c, &k);
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("CONVERGENCE_DEADLINE_EXCEEDED"))
    );
    assert_eq!(data, Some(json!({"timeoutMs": 300})));
    let ev = evidence(&mut c, &k);
    assert_eq!(
        ev.last().map(String::as_str),
        Some("failed:CONVERGENCE_DEADLINE_EXCEEDED"),
        "{ev:?}"
    );
    assert!(
        !ev.iter()
            .any(|e| e.contains("REFUSED_CANDIDATE_STOP_PENDING")),
        "{ev:?}"
    );
    assert_eq!(
        evidence(&mut c, &cleanup(&rev)),
        vec!["deferred:REPOSITORY_CLEANUP_PENDING"]
    );
    assert_eq!(driver.calls_of("stop_revision").len(), 1);
}

/// A candidate whose first pass sees `first` pending, and whose every later preparation meets
/// an unavailable API server until past the deadline.
fn pending_then_unavailable(
    first: &'static str,
) -> (crate::agent::Fixture, String, Arc<ScriptedDriver>) {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    let driver = Arc::new(ScriptedDriver::new());
    let mut steps = vec![Prepare::Pending(first)];
    steps.extend((0..40).map(|_| Prepare::Fail(ComputeError::transient("scripted", Some(503)))));
    driver.script_prepare(&rev, steps);
    run_with(&f.db, driver.clone(), deadline(1500), quiet);
    (f, rev, driver)
}

#[test]
fn z3_a_dependency_failing_at_the_deadline_stops_a_candidate_whose_newest_readiness_is_its_bootstrap(
) {
    let (f, rev, driver) = pending_then_unavailable(BOOTSTRAP);
    let mut c = f.db.client();
    crate::support::expect_work(&mut c, &key(&rev)).failed_with("DEPENDENCY_UNAVAILABLE");
    // Its `failed-preparation` cleanup stops it (SPEC G2).
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone()]);
    assert_eq!(
        work(&mut c, &cleanup(&rev)).1.as_deref(),
        Some("REPOSITORY_CLEANUP_COMPLETE")
    );

    let (f, rev, driver) = pending_then_unavailable("WORKLOAD_UNSCHEDULABLE");
    let mut c = f.db.client();
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("DEPENDENCY_UNAVAILABLE")
    );
    assert!(driver.calls_of("stop_revision").is_empty());
    let cleanups: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE agent_target = 'repository_cleanup'",
    );
    assert_eq!(cleanups, 0);
}

#[test]
fn z3_the_deadline_never_stops_an_active_revision() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    run(&f, &Arc::new(ScriptedDriver::new()));
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    requeue(&mut c, &key(&rev));
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Pending(BOOTSTRAP)]);
    let k = key(&rev);
    run_with(&f.db, driver.clone(), deadline(1), |c| ended(c, &k));
    assert_eq!(
        work(&mut c, &k).1.as_deref(),
        Some("CONVERGENCE_DEADLINE_EXCEEDED")
    );
    assert!(driver.calls_of("stop_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}
