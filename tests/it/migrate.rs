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

// V14: an installation upgraded with live claims keeps them. A claim V13 held on
// its work row moves to its lane row with its token, lease and attempt; the work is queued in
// `occ.work` with its count before the claim; the claim's holder completes it as before.
#[test]
fn v14_moves_live_claims_from_work_rows_to_their_lanes() {
    let db = TestDb::empty();
    let mut c = db.client();
    occ_worker::migrate::run_to(&mut c, 13).expect("migrate to V13");
    c.batch_execute(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by)
             VALUES ('a', 'a', 'ready', 'admin'), ('b', 'b', 'ready', 'admin');
         INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, available_at)
         VALUES ('namespace:a:delete:1', 'a', 'deleted', 'admin', now() - interval '2 s'),
                ('namespace:a:delete:2', 'a', 'deleted', 'admin', now() - interval '1 s'),
                ('namespace:b:delete:1', 'b', 'deleted', 'admin', now() - interval '1 s');
         UPDATE occ.work SET state = 'claimed', claim_token = '00000000-0000-4000-8000-000000000001',
             claimed_at = now(), updated_at = now(), lease_expires_at = now() + interval '1 min',
             attempt_count = 2
         WHERE idempotency_key = 'namespace:a:delete:1';",
    )
    .unwrap();
    let report = occ_worker::migrate::run(&mut c).expect("migrate to the latest");
    assert!(
        report.applied.iter().any(|m| m.starts_with("V14__")),
        "{:?}",
        report.applied
    );

    let row = c
        .query_one(
            "SELECT w.state, w.attempt_count, l.claim_token::text, l.claim_attempt,
                    l.lease_expires_at > now(), s.state, s.attempt_count
             FROM occ.work w
             JOIN occ.work_lanes l ON l.claim_id = w.id
             JOIN occ.work_status s ON s.id = w.id
             WHERE w.idempotency_key = 'namespace:a:delete:1'",
            &[],
        )
        .expect("the claim is on its lane");
    let got: (String, i32, String, i32, bool, String, i32) = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
        row.get(6),
    );
    assert_eq!(
        got,
        (
            "queued".into(),
            1,
            "00000000-0000-4000-8000-000000000001".into(),
            2,
            true,
            "claimed".into(),
            2
        )
    );
    // The claim's holder completes it; lane b's work is claimable, lane a's second is not.
    let id: i64 = scalar(
        &mut c,
        "SELECT id FROM occ.work WHERE idempotency_key = 'namespace:a:delete:1'",
    );
    let opts = occ_worker::queue::QueueOptions::new(std::time::Duration::from_secs(30), 5);
    let claims = occ_worker::queue::work_claim_batch(&mut c, &opts, 10).unwrap();
    let keys: Vec<&str> = claims.iter().map(|cl| cl.key.as_str()).collect();
    assert_eq!(keys, ["namespace:b:delete:1"], "lane a is still held");
    // What `queue::work_complete` sends for the claim it holds (a batch of one).
    let completed = c
        .query(
            include_str!("../../sql/queries/work_complete_batch.sql"),
            &[
                &vec![id],
                &vec!["00000000-0000-4000-8000-000000000001"],
                &vec!["DONE"],
                &vec![None::<serde_json::Value>],
            ],
        )
        .unwrap()
        .len();
    assert_eq!(completed, 1);
    let (state, attempts): (String, i32) = {
        crate::support::row2(
            &mut c,
            "SELECT state, attempt_count FROM occ.work WHERE id = $1",
            &[&id],
        )
    };
    assert_eq!((state.as_str(), attempts), ("succeeded", 2));
}

/// Runs `occ-worker migrate` on the database at `url`.
fn migrate_command(url: &str) {
    crate::support::output_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_occ-worker")).args([
            "--database-url",
            url,
            "--json",
            "migrate",
        ]),
        "occ-worker migrate",
    );
}

// STYLE 16: `migrate` applies every function and view file on every run, after the
// versioned migrations, and applying them again leaves the schema as it was: a second
// `occ-worker migrate` applies no migration and changes nothing, and a third restores a
// function changed behind its back.
#[test]
fn migrating_again_reapplies_the_functions_and_changes_nothing() {
    let db = TestDb::empty();
    migrate_command(&db.url);
    let first = crate::support::schema_dump(&db.url);
    let mut c = db.client();
    let oids = |c: &mut Client| -> Vec<(String, i64)> {
        c.query(
            "SELECT p.oid::regprocedure::text, p.oid::int8 FROM pg_proc p
             WHERE p.pronamespace = 'occ'::regnamespace
             UNION ALL SELECT c.oid::regclass::text, c.oid::int8 FROM pg_class c
             WHERE c.relnamespace = 'occ'::regnamespace AND c.relkind = 'v'
             ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
    };
    let before = oids(&mut c);
    migrate_command(&db.url);
    assert_eq!(crate::support::schema_dump(&db.url), first);
    assert_eq!(
        oids(&mut c),
        before,
        "replaced in place, not dropped and created"
    );

    c.batch_execute(
        "CREATE OR REPLACE FUNCTION occ.installation_id() RETURNS text
             LANGUAGE sql STABLE AS $$ SELECT 'changed' $$;
         CREATE OR REPLACE VIEW occ.namespaces AS
             SELECT id, name, status, existing_namespace, created_by, created_at, updated_at
             FROM occ.namespaces_all;",
    )
    .unwrap();
    assert_ne!(crate::support::schema_dump(&db.url), first);
    migrate_command(&db.url);
    assert_eq!(crate::support::schema_dump(&db.url), first);
    let history: i64 = scalar(&mut c, "SELECT count(*) FROM refinery_schema_history");
    assert_eq!(
        history,
        occ_worker::migrate::embedded_names().len() as i64,
        "each version applied once"
    );
}
