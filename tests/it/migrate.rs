//! Migrations (refinery, embedded): two processes migrating one empty database at the same
//! moment take turns under the migration lock, so the schema is applied exactly once.

use crate::support::{scalar, TestDb};
use postgres::{Client, NoTls};
use std::sync::{Arc, Barrier};

#[test]
fn two_concurrent_migrations_of_an_empty_database_both_succeed_and_apply_each_version_once() {
    let db = TestDb::empty();
    let barrier = Arc::new(Barrier::new(2));
    let runners: Vec<_> = (0..2)
        .map(|_| {
            let url = db.url.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut client = Client::connect(&url, NoTls).expect("connect");
                barrier.wait();
                occ_worker::migrate::run(&mut client)
            })
        })
        .collect();
    let reports: Vec<_> = runners
        .into_iter()
        .map(|r| r.join().expect("migration thread").expect("migrate"))
        .collect();

    let embedded: Vec<String> = occ_worker::migrate::embedded_names()
        .into_iter()
        .map(|(v, name)| format!("V{v}__{name}"))
        .collect();
    assert!(!embedded.is_empty());
    // One runner applied everything, the other found nothing left to do.
    let mut applied: Vec<Vec<String>> = reports.iter().map(|r| r.applied.clone()).collect();
    applied.sort_by_key(|a| a.len());
    assert_eq!(applied, [Vec::new(), embedded.clone()]);
    // Changed: the current version is the latest embedded one, not their count (the same
    // while versions are 1..n; conventions.rs checks the numbering).
    let latest = occ_worker::migrate::embedded_names()
        .into_iter()
        .map(|(v, _)| v)
        .max();
    for report in &reports {
        assert_eq!(report.current, latest);
    }

    let mut c = db.client();
    let history: Vec<(i32, i64)> = c
        .query(
            "SELECT version, count(*) FROM refinery_schema_history GROUP BY version ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let expected: Vec<(i32, i64)> = occ_worker::migrate::embedded_names()
        .into_iter()
        .map(|(v, _)| (v, 1))
        .collect();
    assert_eq!(history, expected, "each version recorded once");
    let roles: i64 = scalar(&mut c, "SELECT count(*) FROM occ.iam_roles WHERE builtin");
    assert_eq!(roles, 4, "the built-in roles were inserted once");
}
