//! The queue engine (SPEC Q4, Q6, Q10, W1) against a real PostgreSQL: batched claims take one
//! head per lane, lane order survives lease recovery, claims never read future-dated rows or
//! the backlog behind a busy lane, and a batched finalization publishes every pass whose claim
//! is live while reporting the lost one as `ClaimLost`, and the claim a publication makes for
//! the slots it frees commits with it, or alone is refused.

use crate::support::{context, insert_namespace, scalar, TestDb};
use occ_worker::queue::*;
use occ_worker::reconcile::publish::{finalize_batch, publish_and_claim, BatchItem};
use occ_worker::reconcile::{DynReconciler, LeaseState, Pass, PassError, Reconciler, Report};
use postgres::Client;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn opts() -> QueueOptions {
    QueueOptions::new(Duration::from_secs(30), 5)
}

fn deletion(ns: &str, n: u32) -> NewWork {
    NewWork::namespace_delete(ns, Some(n), "admin")
}

/// Marks its Namespace `ready` as its publication, so a test can see what was published;
/// the publication of the Namespace named in `refused` fails in the database (a status the
/// table's check refuses).
struct MarksReady {
    refused: Option<&'static str>,
}

impl Reconciler for MarksReady {
    type Facts = ();

    fn reconcile(&self, _pass: &Pass<'_>) -> Result<Report, PassError> {
        Ok(Report::success("DONE"))
    }

    fn publish(
        &self,
        tx: &mut occ_worker::db::Tx<'_>,
        pass: &Pass<'_>,
        _report: &Report,
    ) -> Result<(), PassError> {
        let namespace = pass.claim.namespace_id.as_str();
        let status = if self.refused == Some(namespace) {
            "not-a-status"
        } else {
            "ready"
        };
        tx.execute(
            "UPDATE occ.namespaces_all SET status = $2 WHERE id = $1",
            &[&namespace, &status],
        )?;
        Ok(())
    }
}

/// Marks its Namespace ready, and for `expires`, also ends its own claim's lease inside the
/// publication's transaction: the claim was live when the batch locked it and is no longer
/// live when the batch completes it.
struct LeaseRunsOut {
    expires: &'static str,
}

impl Reconciler for LeaseRunsOut {
    type Facts = ();

    fn reconcile(&self, _pass: &Pass<'_>) -> Result<Report, PassError> {
        Ok(Report::success("DONE"))
    }

    fn publish(
        &self,
        tx: &mut occ_worker::db::Tx<'_>,
        pass: &Pass<'_>,
        report: &Report,
    ) -> Result<(), PassError> {
        Reconciler::publish(&MarksReady { refused: None }, tx, pass, report)?;
        if pass.claim.namespace_id == self.expires {
            tx.execute(
                "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() WHERE claim_id = $1",
                &[&pass.claim.id],
            )?;
        }
        Ok(())
    }
}

/// A provisioning Namespace and its ensure work for each of `names`, and `claim` of those
/// works claimed (asserted); a context with a 30 s lease, and when the claim was sent.
fn ensures_claimed(
    db: &TestDb,
    c: &mut Client,
    names: &[&str],
    claim: usize,
) -> (Arc<occ_worker::reconcile::Context>, Vec<Claim>, Instant) {
    for ns in names {
        insert_namespace(c, ns, "provisioning");
        work_enqueue(c, &NewWork::namespace_ensure(ns, "admin")).unwrap();
    }
    let (ctx, _events) = context(db, Duration::from_secs(30), 5);
    let sent = Instant::now();
    let claims = work_claim_batch(c, &ctx.queue, claim).unwrap();
    assert_eq!(claims.len(), claim);
    (ctx, claims, sent)
}

/// Each work's Namespace and state (`occ.work_status`), by Namespace.
fn work_states(c: &mut Client) -> Vec<(String, String)> {
    c.query(
        "SELECT namespace_id, state FROM occ.work_status ORDER BY namespace_id",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// `(Namespace, state)` pairs as `work_states` answers them.
fn states(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect()
}

/// The attempt rows of the works of Namespace `ns`.
fn attempts_of(c: &mut Client, ns: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
         WHERE w.namespace_id = $1",
        &[&ns],
    )
    .unwrap()
    .get(0)
}

fn status(c: &mut Client, ns: &str) -> String {
    c.query_one(
        "SELECT status FROM occ.namespaces_all WHERE id = $1",
        &[&ns],
    )
    .unwrap()
    .get(0)
}

// Q4: one statement claims up to the limit, one head per distinct lane, oldest
// first; a lane whose head is claimed yields nothing more until it is released.
#[test]
fn a_batch_claim_never_returns_two_works_of_one_lane() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for ns in ["a", "b", "c"] {
        insert_namespace(&mut c, ns, "ready");
    }
    let mut ids = std::collections::HashMap::new();
    for (ns, n) in [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("c", 1), ("b", 2)] {
        let id = work_enqueue(&mut c, &deletion(ns, n)).unwrap().id;
        ids.insert((ns, n), id);
    }
    let o = opts();
    let claims = work_claim_batch(&mut c, &o, 10).unwrap();
    let got: Vec<(String, i64)> = claims.iter().map(|cl| (cl.lane.clone(), cl.id)).collect();
    assert_eq!(
        got,
        [
            ("namespace:a".to_string(), ids[&("a", 1)]),
            ("namespace:b".to_string(), ids[&("b", 1)]),
            ("namespace:c".to_string(), ids[&("c", 1)]),
        ],
        "one head per lane, oldest first"
    );
    assert!(
        work_claim_batch(&mut c, &o, 10).unwrap().is_empty(),
        "every lane is busy"
    );
    // The limit bounds the batch.
    for cl in &claims {
        work_complete(&mut c, cl, "DONE", None).unwrap();
    }
    let next = work_claim_batch(&mut c, &o, 1).unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].id, ids[&("a", 2)], "the lane's next work, promoted");
    let rest = work_claim_batch(&mut c, &o, 10).unwrap();
    assert_eq!(
        rest.iter().map(|cl| cl.id).collect::<Vec<_>>(),
        [ids[&("b", 2)]]
    );
    // PostgreSQL itself refuses a second live claim in a lane, whoever writes it: a lane
    // holds one claim (its row's claim columns, V14), and a second lane row is refused.
    let err = c
        .execute(
            "INSERT INTO occ.work_lanes (lane, claim_id, claim_token, claimed_at, renewed_at,
                 lease_expires_at, claim_attempt)
             VALUES ('namespace:a', $1, gen_random_uuid(), now(), now(),
                 now() + interval '1 min', 1)",
            &[&ids[&("a", 3)]],
        )
        .expect_err("a second live claim in lane a");
    assert_eq!(
        err.as_db_error().and_then(|e| e.constraint()),
        Some("work_lanes_pkey")
    );
    assert_eq!(lanes_out_of_step(&mut c), 0);
}

// Q10: a work whose lease expired returns to the head of its lane, ahead of
// the works queued behind it while it was claimed.
#[test]
fn lane_order_is_kept_across_lease_recovery() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "a", "ready");
    let o = opts();
    let first = work_enqueue(&mut c, &deletion("a", 1)).unwrap().id;
    let claim = work_claim(&mut c, &o).unwrap().expect("the first work");
    assert_eq!(claim.id, first);
    let second = work_enqueue(&mut c, &deletion("a", 2)).unwrap().id;
    c.batch_execute(
        "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() - interval '1 s' WHERE claim_id IS NOT NULL",
    )
    .unwrap();
    assert_eq!(work_recover_stale(&mut c, &o).unwrap().requeued, 1);
    let again = work_claim_batch(&mut c, &o, 10).unwrap();
    assert_eq!(
        again
            .iter()
            .map(|cl| (cl.id, cl.attempt))
            .collect::<Vec<_>>(),
        [(first, 2)],
        "the recovered work, not the one queued behind it"
    );
    work_complete(&mut c, &again[0], "DONE", None).unwrap();
    let then = work_claim(&mut c, &o).unwrap().expect("the second work");
    assert_eq!(then.id, second);
    assert_eq!(lanes_out_of_step(&mut c), 0);
}

/// `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of the claim, rolled back.
fn explain_claim(c: &mut Client) -> Value {
    let sql = include_str!("../../sql/queries/work_claim.sql")
        .replace("$1::bigint", "30000::bigint")
        .replace("$2", "16")
        .replace("$3", "'6d1f5a3c-8a4e-4b7e-9c1d-2f3a4b5c6d7e'")
        .replace("$4", "'worker-host'")
        .replace("$5", "4242");
    let mut tx = c.transaction().unwrap();
    let plan: Value = tx
        .query_one(
            &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"),
            &[],
        )
        .unwrap()
        .get(0);
    tx.rollback().unwrap();
    plan
}

/// Every plan node, depth first.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut out = vec![plan];
    for child in plan["Plans"].as_array().into_iter().flatten() {
        out.extend(nodes(child));
    }
    out
}

/// Rows every node of the claim's plan read from `occ.work` or `occ.work_lanes` (actual rows
/// plus rows removed by a filter).
fn rows_read(plan: &Value) -> i64 {
    let scans: Vec<&Value> = nodes(&plan[0]["Plan"])
        .into_iter()
        .filter(|n| {
            matches!(
                n["Relation Name"].as_str(),
                Some("work") | Some("work_lanes")
            )
        })
        .collect();
    assert!(
        scans
            .iter()
            .any(|n| n["Index Name"].as_str() == Some("work_lanes_ready")),
        "the claim scans the lane heads' index: {plan:#}"
    );
    scans
        .into_iter()
        .map(|n| {
            n["Actual Rows"].as_i64().unwrap_or(0) * n["Actual Loops"].as_i64().unwrap_or(1)
                + n["Rows Removed by Filter"].as_i64().unwrap_or(0)
        })
        .sum()
}

// Q4: with 500 future-dated works in 500 lanes and 500 works queued behind
// one busy lane's head, a claim (and so an idle poll) reads none of them: claimable now is an
// index range over lane heads.
#[test]
fn a_claim_reads_neither_future_dated_rows_nor_the_backlog_behind_a_busy_lane() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    c.batch_execute(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by)
         SELECT 'f' || i, 'f' || i, 'ready', 'admin' FROM generate_series(1, 500) i;
         INSERT INTO occ.namespaces_all (id, name, status, created_by) VALUES ('busy', 'busy', 'ready', 'admin');",
    )
    .unwrap();
    for i in 1..=500 {
        work_enqueue_at(
            &mut c,
            &deletion(&format!("f{i}"), 1),
            Duration::from_secs(3600),
        )
        .unwrap();
    }
    for n in 1..=501 {
        work_enqueue(&mut c, &deletion("busy", n)).unwrap();
    }
    let o = opts();
    let head = work_claim_batch(&mut c, &o, 16).unwrap();
    assert_eq!(head.len(), 1, "only the busy lane's head is claimable now");
    c.batch_execute("ANALYZE occ.work; ANALYZE occ.work_lanes")
        .unwrap();
    let plan = explain_claim(&mut c);
    assert_eq!(
        rows_read(&plan),
        0,
        "the claim read rows it cannot claim: {plan:#}"
    );
    let queued: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work_status WHERE state = 'queued'",
    );
    assert_eq!(queued, 1000);
}

// A publication's statements and the claim after it, on the worker's
// own session settings, find the rows they name by key, never by reading the lane table or the
// work table whole. With 1,000 lanes and 2,000 works, PostgreSQL's default cost model (a page
// fetched at random costs four read in order) prices a scan below 16 probes by key: without
// the worker's `random_page_cost` the lane trigger's lock and update and the claim's update
// each scanned the lane table (the lock comparing every row with each lane named), and without
// the claim's lateral probe its generic plan scanned `occ.work` for the heads' works: about a
// fifth of the drain's time at 16 threads (README, Benchmarks).
#[test]
fn a_publication_and_its_claim_never_scan_the_lane_table() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    c.batch_execute(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by)
         SELECT 'n' || i, 'n' || i, 'ready', 'admin' FROM generate_series(1, 1000) i;
         INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
         SELECT format('namespace:n%s:delete:%s', i % 1000 + 1, 1 + i / 1000),
                'n' || (i % 1000 + 1), 'deleted', 'admin'
         FROM generate_series(0, 1999) i ORDER BY i;
         ANALYZE occ.work; ANALYZE occ.work_lanes;",
    )
    .unwrap();
    let o = opts();
    let pool = db.pool(1);
    let mut worker = pool.get().unwrap();
    let claims = work_claim_batch(&mut *worker, &o, 16).unwrap();
    assert_eq!(claims.len(), 16);
    let mut tx = worker.transaction().unwrap();
    let wanted: Vec<&Claim> = claims.iter().collect();
    assert_eq!(work_lock_claims(&mut tx, &wanted).unwrap().len(), 16);
    let done: Vec<(&Claim, &str, Option<&Value>)> =
        claims.iter().map(|cl| (cl, "DONE", None)).collect();
    assert_eq!(work_complete_batch(&mut tx, &done).unwrap().len(), 16);
    assert_eq!(work_claim_batch(&mut tx, &o, 16).unwrap().len(), 16);
    let scans: Vec<(String, i64)> = tx
        .query(
            "SELECT relname::text, seq_scan FROM pg_stat_xact_user_tables
             WHERE schemaname = 'occ' AND relname IN ('work', 'work_lanes', 'work_attempts')
             ORDER BY relname",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    tx.commit().unwrap();
    assert_eq!(
        scans,
        [
            ("work".to_string(), 0),
            ("work_attempts".to_string(), 0),
            ("work_lanes".to_string(), 0)
        ],
        "sequential scans in the publication's transaction"
    );
    assert_eq!(lanes_out_of_step(&mut c), 0);
}

/// One answer per pass of a batch.
type Answers = Vec<Result<occ_worker::reconcile::AnyReport, PassError>>;

/// Runs `run` with one batch item per claim of `claims`, each a success of `reconciler`.
fn with_successes<T>(
    ctx: &occ_worker::reconcile::Context,
    claims: &[Claim],
    sent: Instant,
    reconciler: &dyn DynReconciler,
    run: impl FnOnce(Vec<BatchItem<'_>>) -> T,
) -> T {
    let leases: Vec<LeaseState> = claims
        .iter()
        .map(|cl| LeaseState::new(cl, sent, ctx.queue.lease))
        .collect();
    let items = claims
        .iter()
        .zip(&leases)
        .map(|(claim, lease)| BatchItem {
            pass: Pass { claim, ctx, lease },
            reconciler,
            resolved: occ_worker::reconcile::AnyReport::success("DONE"),
        })
        .collect();
    run(items)
}

/// Publishes every claim of `claims` as a success of `MarksReady` in one transaction that
/// then claims up to `claim` works; returns the answers and the claimed works.
fn publish_successes_and_claim(
    ctx: &occ_worker::reconcile::Context,
    claims: &[Claim],
    sent: Instant,
    claim: usize,
) -> (Answers, Result<Vec<Claim>, PassError>) {
    let (answers, claimed) =
        with_successes(ctx, claims, sent, &MarksReady { refused: None }, |items| {
            publish_and_claim(ctx, items, claim, &|| {})
        });
    let claimed = claimed.expect("a claim was asked for").map(|(c, _)| c);
    (answers, claimed)
}

/// Finalizes every claim of `claims` as a success of `reconciler`, in one batch.
fn finalize_successes(
    ctx: &occ_worker::reconcile::Context,
    claims: &[Claim],
    sent: Instant,
    reconciler: &dyn DynReconciler,
) -> Answers {
    with_successes(ctx, claims, sent, reconciler, |items| {
        finalize_batch(ctx, items)
    })
}

// Q6: finalizations batched in one transaction, a savepoint each: the pass whose
// claim was lost gets `ClaimLost` and publishes nothing; the others publish and complete.
#[test]
fn a_batched_completion_with_one_lost_claim_publishes_the_others() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let (ctx, claims, sent) = ensures_claimed(&db, &mut c, &["a", "b", "c"], 3);
    // Another worker took b's claim over (its token is no longer ours).
    c.execute(
        "UPDATE occ.work_lanes SET claim_token = gen_random_uuid() WHERE claim_id = $1",
        &[&claims[1].id],
    )
    .unwrap();
    let answers = finalize_successes(&ctx, &claims, sent, &MarksReady { refused: None });
    assert_eq!(answers.len(), 3);
    assert!(answers[0].is_ok(), "{:?}", answers[0]);
    assert!(
        matches!(answers[1], Err(PassError::ClaimLost)),
        "{:?}",
        answers[1]
    );
    assert!(answers[2].is_ok(), "{:?}", answers[2]);
    assert_eq!(status(&mut c, "a"), "ready");
    assert_eq!(
        status(&mut c, "b"),
        "provisioning",
        "nothing of b published"
    );
    assert_eq!(status(&mut c, "c"), "ready");
    assert_eq!(
        work_states(&mut c),
        states(&[("a", "succeeded"), ("b", "claimed"), ("c", "succeeded")])
    );
    let evidence = attempts_of(&mut c, "b");
    assert_eq!(evidence, 0, "no evidence from the lost claim");
}

// Q6 (V16): a publication sends its completion, its claim and its COMMIT
// in one message, so the completion is all or none. A claim live when the batch locked it and
// no longer live when it completes (its lease ran out meanwhile) refuses the whole message:
// nothing of that transaction commits, and unit by unit that pass alone is `ClaimLost` and
// publishes nothing, the others publish and complete, and the claim asked for is made. A
// completion that let the others through would commit b's publication without its completion.
#[test]
fn a_lease_that_runs_out_between_the_lock_and_the_completion_commits_nothing_of_its_pass() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let (ctx, claims, sent) = ensures_claimed(&db, &mut c, &["a", "b", "c", "d"], 3);
    let (answers, claimed) = with_successes(
        &ctx,
        &claims,
        sent,
        &LeaseRunsOut { expires: "b" },
        |items| publish_and_claim(&ctx, items, 1, &|| {}),
    );
    let by_ns: Vec<(&str, bool)> = claims
        .iter()
        .zip(&answers)
        .map(|(cl, a)| (cl.namespace_id.as_str(), a.is_ok()))
        .collect();
    assert_eq!(by_ns, [("a", true), ("b", false), ("c", true)]);
    assert!(
        matches!(answers[1], Err(PassError::ClaimLost)),
        "{:?}",
        answers[1]
    );
    let claimed = claimed.expect("a claim was asked for").unwrap().0;
    assert_eq!(
        claimed
            .iter()
            .map(|c| c.namespace_id.as_str())
            .collect::<Vec<_>>(),
        ["d"]
    );
    assert_eq!(status(&mut c, "a"), "ready");
    assert_eq!(
        status(&mut c, "b"),
        "provisioning",
        "nothing of b published"
    );
    assert_eq!(status(&mut c, "c"), "ready");
    assert_eq!(
        work_states(&mut c),
        states(&[
            ("a", "succeeded"),
            ("b", "claimed"),
            ("c", "succeeded"),
            ("d", "claimed"),
        ])
    );
    let evidence = attempts_of(&mut c, "b");
    assert_eq!(evidence, 0, "no evidence from the claim that ran out");
    assert_eq!(lanes_out_of_step(&mut c), 0);
}

// Q6: a batch is first finalized together (claims locked in one statement,
// completions in one); when one pass's publication fails there, that transaction is rolled
// back whole and the batch runs again a savepoint per pass: the failing pass publishes nothing
// and keeps its claim, the others publish and complete, each with one attempt row.
#[test]
fn a_failing_publication_in_a_batch_loses_no_other_pass() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let (ctx, claims, sent) = ensures_claimed(&db, &mut c, &["a", "b", "c", "d"], 4);
    let answers = finalize_successes(&ctx, &claims, sent, &MarksReady { refused: Some("b") });
    let by_ns: Vec<(&str, bool)> = claims
        .iter()
        .zip(&answers)
        .map(|(cl, a)| (cl.namespace_id.as_str(), a.is_ok()))
        .collect();
    assert_eq!(
        by_ns,
        [("a", true), ("b", false), ("c", true), ("d", true)],
        "{answers:?}"
    );
    assert!(
        matches!(&answers[1], Err(PassError::Db(e)) if e.sqlstate() == Some("23514")),
        "b's own check violation: {:?}",
        answers[1]
    );
    for ns in ["a", "c", "d"] {
        assert_eq!(status(&mut c, ns), "ready");
    }
    assert_eq!(
        status(&mut c, "b"),
        "provisioning",
        "nothing of b published"
    );
    let states: Vec<(String, String, i64)> = c
        .query(
            "SELECT w.namespace_id, w.state,
                    (SELECT count(*) FROM occ.work_attempts a WHERE a.work_id = w.id)
             FROM occ.work_status w ORDER BY w.namespace_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let expected = [
        ("a", "succeeded", 1),
        ("b", "claimed", 0),
        ("c", "succeeded", 1),
        ("d", "succeeded", 1),
    ];
    assert_eq!(
        states,
        expected.map(|(n, s, k)| (n.to_string(), s.to_string(), k))
    );
}

// W1: a publication claims for the slots it frees in the same
// transaction, after the completions, so a lane the batch moved on is claimable in it; the
// claims commit with the publications. A claim the server refuses is rolled back alone: every
// publication still commits and nothing is claimed.
#[test]
fn a_publication_claims_in_its_own_transaction_and_a_refused_claim_loses_no_publication() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for ns in ["a", "b", "c", "d"] {
        insert_namespace(&mut c, ns, "provisioning");
    }
    for (ns, n) in [("a", 1), ("a", 2), ("b", 1), ("c", 1)] {
        work_enqueue(&mut c, &deletion(ns, n)).unwrap();
    }
    let (ctx, _events) = context(&db, Duration::from_secs(30), 5);
    let key = |cl: &Claim| cl.key.clone();
    let sent = Instant::now();
    let first = work_claim_batch(&mut c, &ctx.queue, 2).unwrap();
    assert_eq!(
        first.iter().map(key).collect::<Vec<_>>(),
        ["namespace:a:delete:1", "namespace:b:delete:1"]
    );
    let (answers, claimed) = publish_successes_and_claim(&ctx, &first, sent, 3);
    assert!(answers.iter().all(|a| a.is_ok()), "{answers:?}");
    let second = claimed.unwrap();
    let mut keys: Vec<String> = second.iter().map(key).collect();
    keys.sort();
    assert_eq!(
        keys,
        ["namespace:a:delete:2", "namespace:c:delete:1"],
        "lane a moved on inside the transaction; b has nothing more"
    );
    for cl in &second {
        let token: String = crate::support::one(
            &mut c,
            "SELECT claim_token::text FROM occ.work_lanes WHERE claim_id = $1",
            &[&cl.id],
        );
        assert_eq!(token, cl.token, "{}", cl.key);
    }

    // Now every claim is refused by the server; the publication still commits.
    work_enqueue(&mut c, &deletion("d", 1)).unwrap();
    c.batch_execute(
        "CREATE FUNCTION public.refuse_claims() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'claims refused'; END $$;
         CREATE TRIGGER refuse_claims BEFORE UPDATE ON occ.work_lanes FOR EACH ROW
             WHEN (OLD.claim_id IS NULL AND NEW.claim_id IS NOT NULL)
             EXECUTE FUNCTION public.refuse_claims();",
    )
    .unwrap();
    let (answers, claimed) = publish_successes_and_claim(&ctx, &second, sent, 2);
    assert!(answers.iter().all(|a| a.is_ok()), "{answers:?}");
    assert!(
        matches!(&claimed, Err(PassError::Db(e)) if e.sqlstate() == Some("P0001")),
        "the refused claim is reported: {claimed:?}"
    );
    let states: Vec<(String, String)> = c
        .query(
            "SELECT idempotency_key, state FROM occ.work_status ORDER BY idempotency_key",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let expected = [
        ("namespace:a:delete:1", "succeeded"),
        ("namespace:a:delete:2", "succeeded"),
        ("namespace:b:delete:1", "succeeded"),
        ("namespace:c:delete:1", "succeeded"),
        ("namespace:d:delete:1", "queued"),
    ];
    assert_eq!(
        states,
        expected.map(|(k, s)| (k.to_string(), s.to_string()))
    );
    for ns in ["a", "b", "c"] {
        assert_eq!(status(&mut c, ns), "ready", "{ns} published");
    }
}

/// Lanes whose `occ.work_lanes` row differs from a full recomputation over `occ.work`.
fn lanes_out_of_step(c: &mut Client) -> i64 {
    scalar(
        c,
        "SELECT count(*) FROM occ.work_lanes l
         LEFT JOIN LATERAL (SELECT w.id, w.available_at FROM occ.work w
                            WHERE w.lane = l.lane AND w.state = 'queued'
                            ORDER BY w.available_at, w.id LIMIT 1) h ON true
         WHERE (l.head_id, l.head_at) IS DISTINCT FROM (h.id, h.available_at)
            OR (l.claim_id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM occ.work w
                                WHERE w.id = l.claim_id AND w.lane = l.lane AND w.state = 'queued'))",
    )
}

// Q4: the lane rows the trigger keeps incrementally match a full recomputation
// after concurrent enqueues, batched claims, completions, deferrals, retries and recoveries
// from eight sessions over five lanes.
#[test]
fn lane_heads_stay_exact_under_concurrent_transitions() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for ns in 0..5 {
        insert_namespace(&mut c, &format!("n{ns}"), "ready");
    }
    let sessions: Vec<_> = (0..8u64)
        .map(|s| {
            let mut client = db.client();
            std::thread::spawn(move || {
                let o = QueueOptions::new(Duration::from_secs(30), 1000);
                let mut seed = s * 7919 + 1;
                let mut next = move |n: u64| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (seed >> 33) % n
                };
                for i in 0..150u32 {
                    let ns = format!("n{}", next(5));
                    match next(4) {
                        0 | 1 => {
                            let delay = Duration::from_millis(next(3) * 5);
                            work_enqueue_at(
                                &mut client,
                                &deletion(&ns, s as u32 * 1000 + i + 1),
                                delay,
                            )
                            .unwrap();
                        }
                        _ => {
                            for claim in work_claim_batch(&mut client, &o, 3).unwrap() {
                                let done = match next(4) {
                                    0 => work_defer(
                                        &mut client,
                                        &claim,
                                        "PENDING",
                                        Duration::ZERO,
                                        false,
                                        None,
                                    ),
                                    1 => work_retry(
                                        &mut client,
                                        &claim,
                                        "DEPENDENCY_UNAVAILABLE",
                                        &o,
                                    )
                                    .map(|_| ()),
                                    _ => work_complete(&mut client, &claim, "DONE", None),
                                };
                                // Another session's recovery may have taken it back.
                                if let Err(e) = done {
                                    assert!(e.is_claim_lost(), "{e}");
                                }
                            }
                        }
                    }
                    if i % 50 == 0 {
                        client
                            .batch_execute(
                                "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp()
                                 WHERE claim_id IS NOT NULL AND random() < 0.2",
                            )
                            .unwrap();
                        work_recover_stale(&mut client, &o).unwrap();
                    }
                }
            })
        })
        .collect();
    for s in sessions {
        s.join().expect("a session panicked");
    }
    assert_eq!(lanes_out_of_step(&mut c), 0);
    // Draining what is left keeps them exact, lane by lane. A claim a session left behind (its
    // lease expired above, its completion refused as lost, and the last recovery passed its
    // lane by while that session held it) is recovered first, as the next recovery would.
    let o = QueueOptions::new(Duration::from_secs(30), 1000);
    c.batch_execute(
        "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() WHERE claim_id IS NOT NULL",
    )
    .unwrap();
    work_recover_stale(&mut c, &o).unwrap();
    c.batch_execute("UPDATE occ.work SET available_at = clock_timestamp() WHERE state = 'queued'")
        .unwrap();
    loop {
        let claims = work_claim_batch(&mut c, &o, 10).unwrap();
        if claims.is_empty() {
            break;
        }
        for claim in claims {
            work_complete(&mut c, &claim, "DONE", None).unwrap();
        }
    }
    assert_eq!(lanes_out_of_step(&mut c), 0);
    let left: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work_status WHERE state IN ('queued', 'claimed')",
    );
    assert_eq!(left, 0);
}

/// The `(head_id, claim_id)` of Namespace `ns`'s lane.
fn lane_row(c: &mut Client, ns: &str) -> (Option<i64>, Option<i64>) {
    crate::support::row2(
        c,
        "SELECT head_id, claim_id FROM occ.work_lanes WHERE lane = 'namespace:' || $1",
        &[&ns],
    )
}

// Q4 (V15): the lanes are kept once per statement. One statement that
// inserts, completes, re-dates or deletes works of several lanes at once leaves every lane
// as a full recomputation has it: heads moved, claims ended exactly when their work left the
// queue or was deleted, untouched lanes and live claims left alone.
#[test]
fn one_statement_over_many_lanes_keeps_every_lane_exact() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let o = opts();
    let mut ids = Vec::new();
    for ns in ["n0", "n1", "n2", "n3"] {
        insert_namespace(&mut c, ns, "ready");
        ids.push(
            (1..=3)
                .map(|n| work_enqueue(&mut c, &deletion(ns, n)).unwrap().id)
                .collect::<Vec<_>>(),
        );
    }
    let claimed = work_claim_batch(&mut c, &o, 10).unwrap();
    assert_eq!(claimed.len(), 4, "one head per lane");

    // One completion statement over three lanes: the claimed heads of n0 and n1, and a work
    // queued behind n2's claimed head.
    let done = c
        .execute(
            "UPDATE occ.work SET state = 'succeeded', reason_code = 'DONE',
                 completed_at = clock_timestamp()
             WHERE id = ANY ($1)",
            &[&vec![ids[0][0], ids[1][0], ids[2][1]]],
        )
        .unwrap();
    assert_eq!(done, 3);
    assert_eq!(
        lane_row(&mut c, "n0"),
        (Some(ids[0][1]), None),
        "claim ended, next head"
    );
    assert_eq!(
        lane_row(&mut c, "n1"),
        (Some(ids[1][1]), None),
        "claim ended, next head"
    );
    assert_eq!(
        lane_row(&mut c, "n2"),
        (Some(ids[2][0]), Some(ids[2][0])),
        "claim kept"
    );
    assert_eq!(
        lane_row(&mut c, "n3"),
        (Some(ids[3][0]), Some(ids[3][0])),
        "untouched"
    );
    assert_eq!(lanes_out_of_step(&mut c), 0);

    // One statement re-dates the last work of every lane ahead of the others.
    c.execute(
        "UPDATE occ.work SET available_at = available_at - interval '1 hour'
         WHERE id = ANY ($1)",
        &[&vec![ids[0][2], ids[1][2], ids[2][2], ids[3][2]]],
    )
    .unwrap();
    for (i, ns) in ["n0", "n1"].iter().enumerate() {
        assert_eq!(lane_row(&mut c, ns), (Some(ids[i][2]), None));
    }
    // A claimed head keeps its claim; the lane's head is the earlier work, claimable once
    // the claim ends.
    assert_eq!(lane_row(&mut c, "n2"), (Some(ids[2][2]), Some(ids[2][0])));
    assert_eq!(lane_row(&mut c, "n3"), (Some(ids[3][2]), Some(ids[3][0])));
    assert_eq!(lanes_out_of_step(&mut c), 0);

    // One insert over two lanes, one work due before every queued one, one behind.
    c.batch_execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, available_at)
         VALUES ('namespace:n0:delete:9', 'n0', 'deleted', 'admin', clock_timestamp() - interval '2 hours'),
                ('namespace:n1:delete:9', 'n1', 'deleted', 'admin', clock_timestamp() + interval '1 hour')",
    )
    .unwrap();
    let first_n0: i64 = scalar(
        &mut c,
        "SELECT id FROM occ.work WHERE idempotency_key = 'namespace:n0:delete:9'",
    );
    assert_eq!(lane_row(&mut c, "n0"), (Some(first_n0), None));
    assert_eq!(lane_row(&mut c, "n1"), (Some(ids[1][2]), None));
    assert_eq!(lanes_out_of_step(&mut c), 0);

    // One delete over two lanes takes their claimed works with it: both claims end.
    let deleted = c
        .execute(
            "DELETE FROM occ.work WHERE namespace_id IN ('n2', 'n3') AND state = 'queued'",
            &[],
        )
        .unwrap();
    assert_eq!(deleted, 5);
    assert_eq!(lane_row(&mut c, "n2"), (None, None));
    assert_eq!(lane_row(&mut c, "n3"), (None, None));
    assert_eq!(lanes_out_of_step(&mut c), 0);
    // The lanes of n0 and n1 are claimable again: a claim takes their heads, oldest first.
    let again: Vec<i64> = work_claim_batch(&mut c, &o, 10)
        .unwrap()
        .iter()
        .map(|cl| cl.id)
        .collect();
    assert_eq!(again, [first_n0, ids[1][2]]);
}

/// Notifications on `occ_work` that reached `listener` within a short wait.
fn notifications(listener: &mut Client) -> usize {
    use postgres::fallible_iterator::FallibleIterator;
    listener
        .notifications()
        .timeout_iter(Duration::from_millis(300))
        .count()
        .unwrap()
}

// Q13: a notification goes out only when work becomes claimable now by an
// insert or a release, once per transaction; future-dated inserts, deferrals and completions
// wake nobody.
#[test]
fn wake_ups_only_when_work_becomes_claimable_once_per_transaction() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let mut listener = db.client();
    listener.batch_execute("LISTEN occ_work").unwrap();
    for ns in ["a", "b", "c", "d"] {
        insert_namespace(&mut c, ns, "ready");
    }
    let mut tx = c.transaction().unwrap();
    for ns in ["a", "b", "c"] {
        work_enqueue(&mut tx, &deletion(ns, 1)).unwrap();
    }
    tx.commit().unwrap();
    assert_eq!(
        notifications(&mut listener),
        1,
        "three inserts, one wake-up"
    );
    work_enqueue_at(&mut c, &deletion("d", 1), Duration::from_secs(3600)).unwrap();
    assert_eq!(
        notifications(&mut listener),
        0,
        "not claimable before its due time"
    );
    let o = opts();
    let claims = work_claim_batch(&mut c, &o, 3).unwrap();
    assert_eq!(claims.len(), 3);
    assert_eq!(notifications(&mut listener), 0, "a claim wakes nobody");
    work_defer(
        &mut c,
        &claims[0],
        "PENDING",
        Duration::from_secs(3600),
        true,
        None,
    )
    .unwrap();
    work_complete(&mut c, &claims[1], "DONE", None).unwrap();
    assert_eq!(
        notifications(&mut listener),
        0,
        "a deferral to later and a completion wake nobody"
    );
    work_release(&mut c, &claims[2], "WORKER_STOPPING").unwrap();
    assert_eq!(
        notifications(&mut listener),
        1,
        "a release makes it claimable now"
    );
}

// Q5: a heartbeat rewrites no index entry: it changes only unindexed columns of
// a page with room (fillfactor), so PostgreSQL makes it a HOT update.
#[test]
fn a_heartbeat_is_a_hot_update() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "a", "ready");
    work_enqueue(&mut c, &deletion("a", 1)).unwrap();
    let o = opts();
    let claim = work_claim(&mut c, &o).unwrap().expect("a claim");
    // This backend's counts not yet flushed to the shared statistics, before and after.
    let counts = |tx: &mut postgres::Transaction<'_>| -> (i64, i64) {
        let row = tx
            .query_one(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
                 WHERE relid = 'occ.work_lanes'::regclass",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let mut tx = c.transaction().unwrap();
    let before = counts(&mut tx);
    work_heartbeat(&mut tx, &claim, &o).unwrap();
    let after = counts(&mut tx);
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1, 1),
        "one update, and it was HOT"
    );
    tx.commit().unwrap();
}

// Q6, Q10 (V14): a finalizing transaction holds its lane only FOR KEY SHARE:
// an admission into that lane, even one that holds the lane's Namespace row which the
// finalizer then waits for, never waits on it (no deadlock), and recovery passes a held lane by
// until the finalizer is done.
#[test]
fn a_finalizing_transaction_never_makes_admission_wait_and_recovery_passes_it_by() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "a", "ready");
    let o = opts();
    work_enqueue(&mut c, &deletion("a", 1)).unwrap();
    let claim = work_claim(&mut c, &o).unwrap().expect("the first work");

    // The admission side holds the Namespace row, as admission functions do.
    let mut admission = db.client();
    admission
        .batch_execute("SET statement_timeout = '5s'; SET deadlock_timeout = '100ms'")
        .unwrap();
    let mut admit = admission.transaction().unwrap();
    admit
        .execute(
            "SELECT 1 FROM occ.namespaces_all WHERE id = 'a' FOR UPDATE",
            &[],
        )
        .unwrap();
    // The finalizer locks its claim, then waits for the Namespace row (its publication).
    let mut finalizer = db.client();
    let fin_claim = claim.clone();
    let (locked_tx, locked) = crossbeam_channel::bounded(1);
    let fin = std::thread::spawn(move || {
        let mut tx = finalizer.transaction().unwrap();
        work_lock_claim(&mut tx, &fin_claim).expect("the claim is live");
        locked_tx.send(()).unwrap();
        tx.execute(
            "SELECT 1 FROM occ.namespaces_all WHERE id = 'a' FOR UPDATE",
            &[],
        )
        .expect("the Namespace row, once the admission commits");
        work_complete(&mut tx, &fin_claim, "DONE", None).unwrap();
        tx.commit().unwrap();
    });
    locked.recv().unwrap();
    let second = work_enqueue(&mut admit, &deletion("a", 2))
        .expect("the lane trigger does not wait for a finalizer's FOR KEY SHARE")
        .id;
    admit.commit().unwrap();
    fin.join().unwrap();
    let state: String = scalar(
        &mut c,
        &format!("SELECT state FROM occ.work_status WHERE id = {}", claim.id),
    );
    assert_eq!(
        state, "succeeded",
        "the finalizer published after the admission"
    );
    assert_eq!(lanes_out_of_step(&mut c), 0);

    // A held claim whose lease ran out is passed by, without waiting, until it is let go.
    let next = work_claim(&mut c, &o).unwrap().expect("the admitted work");
    assert_eq!(next.id, second);
    let mut holder = db.client();
    let mut held = holder.transaction().unwrap();
    work_lock_claim(&mut held, &next).unwrap();
    c.execute(
        "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() - interval '1 s'
         WHERE claim_id = $1",
        &[&next.id],
    )
    .expect("a lease can be changed under FOR KEY SHARE");
    let mut recovery = db.client();
    recovery
        .batch_execute("SET statement_timeout = '5s'")
        .unwrap();
    assert_eq!(work_recover_stale(&mut recovery, &o).unwrap().requeued, 0);
    held.rollback().unwrap();
    assert_eq!(work_recover_stale(&mut recovery, &o).unwrap().requeued, 1);
    let again = work_claim(&mut c, &o).unwrap().expect("the recovered work");
    assert_eq!((again.id, again.attempt), (second, 2));
    assert_eq!(lanes_out_of_step(&mut c), 0);
}
