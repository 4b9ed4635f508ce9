//! Smoke tests of the queue statements against a real PostgreSQL (Q1, Q4, Q5, Q7, Q8, Q10),
//! and of the scale-out benchmark's processes draining one queue (Q4, Q6).

use crate::support::{insert_namespace, TestDb};
use occ_worker::queue::*;
use std::time::Duration;

#[test]
fn claim_heartbeat_defer_retry_complete_round_trip() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let opts = QueueOptions::new(Duration::from_secs(5), 3);
    let e = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    assert!(e.inserted);
    let again = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    assert_eq!(
        again,
        Enqueued {
            id: e.id,
            inserted: false
        }
    );

    let claim = work_claim(&mut c, &opts).unwrap().expect("claimable");
    assert_eq!(claim.attempt, 1);
    assert_eq!(claim.operation, Operation::NamespaceEnsure);
    assert!(work_claim(&mut c, &opts).unwrap().is_none(), "lane is busy");
    assert!(work_heartbeat(&mut c, &claim, &opts).unwrap() >= 0);

    work_defer(
        &mut c,
        &claim,
        "NAMESPACE_INCOMPLETE",
        Duration::ZERO,
        true,
        None,
    )
    .unwrap();
    let claim = work_claim(&mut c, &opts)
        .unwrap()
        .expect("deferred work is claimable");
    assert_eq!(claim.attempt, 1, "defer refunds the attempt");

    let mut stale = claim.clone();
    stale.token = "00000000-0000-0000-0000-000000000000".into();
    assert!(work_complete(&mut c, &stale, "NAMESPACE_RECONCILED", None)
        .unwrap_err()
        .is_claim_lost());

    let mut fast = opts;
    fast.retry_base = Duration::ZERO;
    assert_eq!(
        work_retry(&mut c, &claim, "DEPENDENCY_UNAVAILABLE", &fast).unwrap(),
        RetryOutcome::Queued
    );
    let claim = work_claim(&mut c, &opts)
        .unwrap()
        .expect("retried work is claimable");
    assert_eq!(claim.attempt, 2);
    work_complete(&mut c, &claim, "NAMESPACE_RECONCILED", None).unwrap();
    let shown = work_show(&mut c, "namespace:ns1:ensure").unwrap().unwrap();
    assert_eq!(shown.state, occ_worker::queue::WorkState::Succeeded);
    assert_eq!(shown.evidence.unwrap().as_array().unwrap().len(), 3);
    assert_eq!(
        work_recover_stale(&mut c, &opts).unwrap(),
        Recovered::default()
    );
}

#[test]
fn enqueue_at_is_claimable_only_when_due_and_a_deferral_keeps_its_refusal() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let opts = QueueOptions::new(Duration::from_secs(5), 3);
    let work = NewWork::namespace_ensure("ns1", "admin");
    let e = work_enqueue_at(&mut c, &work, Duration::from_millis(400)).unwrap();
    assert!(e.inserted);
    assert!(work_clock(&mut c).unwrap() > 0);
    assert!(work_claim(&mut c, &opts).unwrap().is_none(), "not due yet");
    std::thread::sleep(Duration::from_millis(500));
    let claim = work_claim(&mut c, &opts).unwrap().expect("due");
    // A refusal is recorded even when the deferral records no evidence otherwise.
    work_defer(
        &mut c,
        &claim,
        "REFUSED_CANDIDATE_STOP_PENDING",
        Duration::ZERO,
        false,
        Some("INVALID_DRIVER_OBSERVATION"),
    )
    .unwrap();
    let row = c
        .query_one(
            "SELECT attempt, code, outcome, refusal FROM occ.work_attempts WHERE work_id = $1",
            &[&e.id],
        )
        .unwrap();
    let got: (i32, String, String, Option<String>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        got,
        (
            1,
            "REFUSED_CANDIDATE_STOP_PENDING".into(),
            "deferred".into(),
            Some("INVALID_DRIVER_OBSERVATION".into())
        )
    );
}

// The scale-out benchmark's smoke run (docs/benchmarks.md, `occ-bench --only scale-out`):
// several worker processes and one process drain the same small queue, each drain checked
// exactly once (Q4, Q6) by the benchmark itself; no figure is asserted.
#[test]
fn scale_out_bench_drains_exactly_once_across_processes() {
    let report = occ_bench(&[
        "--only",
        "scale-out",
        "--scale-out-works",
        "300",
        "--scale-out",
        "1x4,2x2",
        "--scale-out-rounds",
        "1",
    ]);
    let loads = report["scaleOut"].as_array().expect("scaleOut");
    let names: Vec<&str> = loads.iter().filter_map(|l| l["load"].as_str()).collect();
    assert_eq!(names, ["noop", "namespaces"]);
    for load in loads {
        let layouts = load["layouts"].as_array().expect("layouts");
        assert_eq!(layouts.len(), 2, "{load}");
        for layout in layouts {
            let run = &layout["runs"][0];
            assert_eq!(run["works"], 300, "{layout}");
            // The CPU per work is reported whole and in its two parts, the worker processes'
            // own and their database sessions'.
            let part = |key: &str| run[key].as_f64().unwrap_or_else(|| panic!("{key}: {run}"));
            let (whole, processes, sessions) = (
                part("queueCpuMsPerWork"),
                part("processesCpuMsPerWork"),
                part("sessionsCpuMsPerWork"),
            );
            assert!(processes > 0.0 && sessions > 0.0, "{run}");
            assert!((processes + sessions - whole).abs() <= 0.002, "{run}");
        }
    }
}

// The drain and paired benchmarks' smoke run (docs/benchmarks.md, `occ-bench --only
// drain,paired`): a small drain beside a one-second bare ceiling, each reporting the WAL it
// wrote per work next to its speed. The cluster is shared with the other tests, so the figures
// are only checked to be there; no figure is asserted.
#[test]
fn drain_and_paired_benches_report_wal_per_work() {
    let report = occ_bench(&[
        "--only",
        "drain,paired",
        "--concurrency",
        "2",
        "--works",
        "200",
        "--paired-concurrency",
        "2",
        "--pairs",
        "1",
        "--pgbench-seconds",
        "1",
    ]);
    let positive = |v: &serde_json::Value, key: &str| {
        let n = v[key].as_f64().unwrap_or_else(|| panic!("{key}: {v}"));
        assert!(n > 0.0, "{key}: {v}");
    };
    let drain = &report["drain"][0];
    assert_eq!(drain["works"], 200, "{drain}");
    positive(drain, "walBytesPerWork");
    let pair = &report["paired"][0]["pairs"][0];
    positive(pair, "ceilingSingleRow");
    positive(pair, "ceilingWalBytesPerWork");
    positive(pair, "walBytesPerWork");
}

/// The benchmark `occ-bench` run with `args` on the test cluster; its JSON report.
fn occ_bench(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_occ-bench"))
        .args(["--database-url", &crate::support::admin_url(), "--json"])
        .args(args)
        .output()
        .expect("run occ-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "occ-bench failed: {stderr}");
    serde_json::from_slice(&out.stdout).expect("one JSON report")
}
