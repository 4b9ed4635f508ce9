//! Smoke test of the queue statements against a real PostgreSQL (Q1, Q4, Q5, Q7, Q8, Q10).

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

    work_defer(&mut c, &claim, "NAMESPACE_INCOMPLETE", Duration::ZERO, true).unwrap();
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
    assert_eq!(shown.state, "succeeded");
    assert_eq!(shown.evidence.unwrap().as_array().unwrap().len(), 3);
    assert_eq!(
        work_recover_stale(&mut c, &opts).unwrap(),
        Recovered::default()
    );
}
