//! The queue's contract against a real PostgreSQL: shapes the database refuses (Q2),
//! idempotent enqueue (Q3), claim order (Q4), fencing of stale claims (Q6), retry and defer
//! budgets (Q7, Q8) and stale-claim recovery (Q10).

use crate::support::{context, insert_agent, insert_namespace, scalar, TestDb};
use occ_worker::cancel::LossCause;
use occ_worker::queue::*;
use occ_worker::reconcile::{finalize, LeaseState, Pass, PassError, Reconciler, Report};
use postgres::error::SqlState;
use postgres::Client;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn opts(max_attempts: i32) -> QueueOptions {
    QueueOptions::new(Duration::from_secs(30), max_attempts)
}

/// Runs `sql` and returns the SQLSTATE and constraint name it was refused with.
fn refused(client: &mut Client, sql: &str) -> (SqlState, Option<String>) {
    let err = client
        .batch_execute(sql)
        .expect_err(&format!("PostgreSQL accepted: {sql}"));
    let db = err.as_db_error().expect("a database error");
    (db.code().clone(), db.constraint().map(str::to_string))
}

fn expire_leases(client: &mut Client) {
    client
        .batch_execute(
            "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() - interval '1 s'
             WHERE claim_id IS NOT NULL",
        )
        .unwrap();
}

fn row_state(client: &mut Client, id: i64) -> (String, i32, Option<String>) {
    crate::support::row3(
        client,
        "SELECT state, attempt_count, reason_code FROM occ.work_status WHERE id = $1",
        &[&id],
    )
}

fn evidence(client: &mut Client, id: i64) -> Vec<(i32, String, String)> {
    client
        .query(
            "SELECT attempt, code, outcome FROM occ.work_attempts WHERE work_id = $1 ORDER BY id",
            &[&id],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

// Q2: every shape outside the three the SPEC allows, and every inconsistent claim or result
// column, is refused by PostgreSQL itself, with the constraint that says why.
#[test]
fn postgres_rejects_every_malformed_work_row() {
    let (_db, mut c) = malformed_rows_world();
    let cases = malformed_work_rows();
    assert!(cases.len() >= 10);
    for (what, sql, state, constraint) in &cases {
        let (got, name) = refused(&mut c, sql);
        assert_eq!(&got, state, "{what}: wrong SQLSTATE ({name:?})");
        // PostgreSQL reports the first failing CHECK by name; a row may break several.
        assert!(
            constraint.split('|').any(|c| name.as_deref() == Some(c)),
            "{what}: refused by {name:?}, expected {constraint}"
        );
    }
    let rows: i64 = scalar(&mut c, "SELECT count(*) FROM occ.work");
    assert_eq!(rows, 1, "only the well-formed row exists");
}

/// Two ready Namespaces with three Agents and one well-formed claimed work in `ns2`.
fn malformed_rows_world() -> (TestDb, Client) {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "ready");
    insert_namespace(&mut c, "ns2", "ready");
    insert_agent(&mut c, "ns1", "a1", 1);
    insert_agent(&mut c, "ns1", "a2", 1);
    insert_agent(&mut c, "ns2", "b1", 1);
    // A valid claimed work (the claim on its lane row, V14), so a second claim in its lane
    // can be attempted.
    c.batch_execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
         VALUES ('namespace:ns2:ensure', 'ns2', 'ready', 'admin');
         UPDATE occ.work_lanes SET claim_id = head_id, claim_token = gen_random_uuid(),
             claimed_at = now(), renewed_at = now(), lease_expires_at = now() + interval '1 min',
             claim_attempt = 1
         WHERE lane = 'namespace:ns2'",
    )
    .expect("a well-formed claim is accepted");
    (db, c)
}

/// (what, statement, SQLSTATE, constraint[|alternative]) of every malformed row (Q1, Q4).
fn malformed_work_rows() -> Vec<(&'static str, &'static str, SqlState, &'static str)> {
    let check = SqlState::CHECK_VIOLATION;
    let fk = SqlState::FOREIGN_KEY_VIOLATION;
    // (what, statement, SQLSTATE, constraint[|alternative]).
    vec![
        (
            "namespace target with an agent",
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, namespace_target, actor_id)
             VALUES ('namespace:ns1:ensure', 'ns1', 'a1', 'ready', 'admin')",
            check.clone(),
            "work_shape",
        ),
        (
            "agent target with a revision",
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, agent_target, actor_id)
             VALUES ('agent:a1:stop:1', 'ns1', 'a1', 'a1-r1', 'stopped', 'admin')",
            check.clone(),
            "work_shape",
        ),
        (
            "no target at all",
            "INSERT INTO occ.work (idempotency_key, namespace_id, actor_id)
             VALUES ('namespace:ns1:ensure', 'ns1', 'admin')",
            check.clone(),
            "work_shape|work_key",
        ),
        (
            "agent target without an agent",
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_target, actor_id)
             VALUES ('agent:a1:delete', 'ns1', 'deleted', 'admin')",
            check.clone(),
            "work_shape|work_key",
        ),
        (
            "both a namespace and an agent target",
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, namespace_target, agent_target, actor_id)
             VALUES ('agent:a1:delete', 'ns1', 'a1', 'deleted', 'deleted', 'admin')",
            check.clone(),
            "work_shape",
        ),
        (
            "key naming another namespace",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
             VALUES ('namespace:ns3:ensure', 'ns1', 'ready', 'admin')",
            check.clone(),
            "work_key",
        ),
        (
            "ensure key on a delete target",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
             VALUES ('namespace:ns1:ensure', 'ns1', 'deleted', 'admin')",
            check.clone(),
            "work_key",
        ),
        (
            "stop key without its sequence number",
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, agent_target, actor_id)
             VALUES ('agent:a1:stop', 'ns1', 'a1', 'stopped', 'admin')",
            check.clone(),
            "work_key",
        ),
        (
            "revision key naming another revision",
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
             VALUES ('agent_revision:a2-r1:reconcile', 'ns1', 'a1', 'a1-r1', 'admin')",
            check.clone(),
            "work_key",
        ),
        (
            // V17 checks the key when a statement writes the columns it reads, updates too.
            "a work moved to a Namespace its key does not name",
            "UPDATE occ.work SET namespace_id = 'ns1' WHERE idempotency_key = 'namespace:ns2:ensure'",
            check.clone(),
            "work_key",
        ),
        (
            "a key rewritten to name another Namespace",
            "UPDATE occ.work SET idempotency_key = 'namespace:ns1:ensure'
             WHERE idempotency_key = 'namespace:ns2:ensure'",
            check.clone(),
            "work_key",
        ),
        (
            "revision of another Agent",
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
             VALUES ('agent_revision:a2-r1:reconcile', 'ns1', 'a1', 'a2-r1', 'admin')",
            fk.clone(),
            "work_revision_id_agent_id_namespace_id_fkey",
        ),
        (
            "revision of an Agent in another Namespace",
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
             VALUES ('agent_revision:b1-r1:reconcile', 'ns1', 'b1', 'b1-r1', 'admin')",
            fk.clone(),
            "work_namespace_id_agent_id_fkey",
        ),
        (
            "unknown namespace",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
             VALUES ('namespace:nope:ensure', 'nope', 'ready', 'admin')",
            fk.clone(),
            "work_namespace_id_fkey",
        ),
        (
            "a work row in the claimed state (a claim lives on its lane)",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, state,
                 attempt_count)
             VALUES ('namespace:ns1:ensure', 'ns1', 'ready', 'admin', 'claimed', 1)",
            check.clone(),
            "work_state_check",
        ),
        (
            "a lane claim without a claim token",
            "INSERT INTO occ.work_lanes (lane, claim_id, claimed_at, renewed_at, lease_expires_at,
                 claim_attempt)
             VALUES ('namespace:ns1', 1, now(), now(), now(), 1)",
            check.clone(),
            "work_lanes_claim",
        ),
        (
            "a lane with a claim token but no claimed work",
            "INSERT INTO occ.work_lanes (lane, claim_token) VALUES ('namespace:ns1', gen_random_uuid())",
            check.clone(),
            "work_lanes_claim",
        ),
        (
            "a lane with a lease but no claim",
            "INSERT INTO occ.work_lanes (lane, lease_expires_at) VALUES ('namespace:ns1', now())",
            check.clone(),
            "work_lanes_claim",
        ),
        (
            "queued with a reason code",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, reason_code)
             VALUES ('namespace:ns1:ensure', 'ns1', 'ready', 'admin', 'DONE')",
            check.clone(),
            "work_result",
        ),
        (
            "a claim before any attempt",
            "INSERT INTO occ.work_lanes (lane, claim_id, claim_token, claimed_at, renewed_at,
                 lease_expires_at, claim_attempt)
             VALUES ('namespace:ns1', 1, gen_random_uuid(), now(), now(), now(), 0)",
            check.clone(),
            "work_lanes_claim_bounded",
        ),
        (
            "terminal without a reason code",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, state, completed_at)
             VALUES ('namespace:ns1:ensure', 'ns1', 'ready', 'admin', 'succeeded', now())",
            check.clone(),
            "work_result",
        ),
        (
            "result data on queued work",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, result_data)
             VALUES ('namespace:ns1:ensure', 'ns1', 'ready', 'admin', '{}')",
            check.clone(),
            "work_result",
        ),
        (
            "result data that is not an object",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, state,
                 reason_code, completed_at, result_data)
             VALUES ('namespace:ns1:ensure', 'ns1', 'ready', 'admin', 'succeeded', 'DONE', now(), '[]')",
            check.clone(),
            "work_result_data_check",
        ),
        (
            "reason code that is not a code",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, state,
                 reason_code, completed_at)
             VALUES ('namespace:ns1:ensure', 'ns1', 'ready', 'admin', 'failed_permanent', 'it broke', now())",
            check.clone(),
            "work_reason_code_check",
        ),
        (
            "unknown state",
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id, state)
             VALUES ('namespace:ns1:ensure', 'ns1', 'ready', 'admin', 'running')",
            check.clone(),
            "work_state_check",
        ),
        (
            "a second live claim in one lane",
            "INSERT INTO occ.work_lanes (lane, claim_id, claim_token, claimed_at, renewed_at,
                 lease_expires_at, claim_attempt)
             VALUES ('namespace:ns2', 1, gen_random_uuid(), now(), now(),
                 now() + interval '1 min', 1)",
            SqlState::UNIQUE_VIOLATION,
            "work_lanes_pkey",
        ),
    ]
}

// Q3: enqueueing an existing key changes nothing, whatever state the row is in.
#[test]
fn enqueue_of_an_existing_key_changes_nothing() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let first = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    assert!(first.inserted);
    let again = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "someone-else")).unwrap();
    assert_eq!(
        again,
        Enqueued {
            id: first.id,
            inserted: false
        }
    );

    let claim = work_claim(&mut c, &opts(5)).unwrap().unwrap();
    work_complete(&mut c, &claim, "NAMESPACE_READY", None).unwrap();
    let after = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    assert_eq!(
        after,
        Enqueued {
            id: first.id,
            inserted: false
        }
    );
    let row = c
        .query_one(
            "SELECT state, actor_id, attempt_count FROM occ.work_status WHERE id = $1",
            &[&first.id],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "succeeded");
    assert_eq!(row.get::<_, String>(1), "admin");
    assert_eq!(row.get::<_, i32>(2), 1);
    let count: i64 = scalar(&mut c, "SELECT count(*) FROM occ.work");
    assert_eq!(count, 1);
}

// Q4: the oldest available row is claimed first; a row available in the future is not claimed.
#[test]
fn claim_takes_the_oldest_available_and_skips_future_rows() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for ns in ["na", "nb", "nc"] {
        insert_namespace(&mut c, ns, "provisioning");
        work_enqueue(&mut c, &NewWork::namespace_ensure(ns, "admin")).unwrap();
    }
    c.batch_execute(
        "UPDATE occ.work SET available_at = clock_timestamp() - interval '1 s' WHERE namespace_id = 'na';
         UPDATE occ.work SET available_at = clock_timestamp() - interval '3 s' WHERE namespace_id = 'nb';
         UPDATE occ.work SET available_at = clock_timestamp() + interval '1 h' WHERE namespace_id = 'nc';",
    )
    .unwrap();
    let first = work_claim(&mut c, &opts(5)).unwrap().unwrap();
    assert_eq!(first.namespace_id, "nb");
    let second = work_claim(&mut c, &opts(5)).unwrap().unwrap();
    assert_eq!(second.namespace_id, "na");
    assert!(
        work_claim(&mut c, &opts(5)).unwrap().is_none(),
        "a row available in an hour is not claimable"
    );
    let lease_ok: bool = crate::support::one(
        &mut c,
        "SELECT lease_expires_at > clock_timestamp() + interval '20 s' AND claim_token IS NOT NULL
             FROM occ.work_status WHERE id = $1",
        &[&first.id],
    );
    assert!(
        lease_ok,
        "the claim sets a token and a lease by the database clock"
    );
}

// Q4 (V29): a claim names its holder, the claiming worker process, in the same statement
// (the one-round-trip publication's claim too), and every way a claim ends clears it.
#[test]
fn a_claim_names_its_holder_and_every_end_of_the_claim_clears_it() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for ns in ["na", "nb", "nc", "nd", "ne"] {
        insert_namespace(&mut c, ns, "provisioning");
        work_enqueue(&mut c, &NewWork::namespace_ensure(ns, "admin")).unwrap();
    }
    let mut options = opts(5);
    options.holder = Holder {
        id: "6d1f5a3c-8a4e-4b7e-9c1d-2f3a4b5c6d7e",
        host: "worker-7f9c",
        pid: 4242,
    };
    let holder = |c: &mut Client, id: i64| -> Option<(String, String, i32)> {
        c.query_opt(
            "SELECT claim_worker::text, claim_host, claim_pid FROM occ.work_status
             WHERE id = $1 AND claim_worker IS NOT NULL",
            &[&id],
        )
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
    };
    let named = Some((options.holder.id.into(), "worker-7f9c".into(), 4242));
    let claims = work_claim_batch(&mut c, &options, 4).unwrap();
    assert_eq!(claims.len(), 4);
    for claim in &claims {
        assert_eq!(holder(&mut c, claim.id), named, "claim {}", claim.id);
    }
    let view = work_show(&mut c, &claims[0].key).unwrap().unwrap();
    let shown = view.holder.expect("a claimed work names its holder");
    assert_eq!(
        (shown.worker_id.as_str(), shown.host.as_str(), shown.pid),
        (options.holder.id, "worker-7f9c", 4242)
    );
    assert!(shown.since.ends_with('Z'), "{}", shown.since);

    work_defer(&mut c, &claims[0], "WAITING", Duration::ZERO, true, None).unwrap();
    work_retry(&mut c, &claims[1], "TRANSIENT", &options).unwrap();
    work_release(&mut c, &claims[2], "WORKER_STOPPING").unwrap();
    work_complete(&mut c, &claims[3], "DONE", None).unwrap();
    let lane_left: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work_lanes
         WHERE claim_worker IS NOT NULL OR claim_host IS NOT NULL OR claim_pid IS NOT NULL",
    );
    assert_eq!(lane_left, 0, "a claim's end clears its holder");
    for claim in &claims {
        assert!(work_show(&mut c, &claim.key)
            .unwrap()
            .unwrap()
            .holder
            .is_none());
    }

    // Recovery of an expired lease clears it too; the holder is all three columns or none.
    let claim = work_claim(&mut c, &options).unwrap().unwrap();
    expire_leases(&mut c);
    work_recover_stale(&mut c, &options).unwrap();
    assert_eq!(holder(&mut c, claim.id), None);
    let lanes: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work_lanes WHERE claim_worker IS NOT NULL",
    );
    assert_eq!(lanes, 0);
    assert_eq!(
        refused(
            &mut c,
            "UPDATE occ.work_lanes SET claim_host = 'h' WHERE claim_id IS NULL"
        ),
        (
            SqlState::CHECK_VIOLATION,
            Some("work_lanes_claim_holder".into())
        )
    );
}

// Q4: a busy lane is skipped in favour of younger work in a free lane.
#[test]
fn claim_skips_a_busy_lane() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    insert_namespace(&mut c, "ns2", "provisioning");
    insert_agent(&mut c, "ns1", "a1", 1);
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    work_enqueue(&mut c, &NewWork::namespace_delete("ns1", None, "admin")).unwrap();
    work_enqueue(&mut c, &NewWork::agent_stop("ns1", "a1", 1, "admin")).unwrap();
    work_enqueue(
        &mut c,
        &NewWork::revision_reconcile("ns1", "a1", "a1-r1", "admin"),
    )
    .unwrap();
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns2", "admin")).unwrap();
    let o = opts(5);
    let keys: Vec<String> = std::iter::from_fn(|| work_claim(&mut c, &o).unwrap())
        .map(|claim| claim.key)
        .collect();
    assert_eq!(
        keys,
        [
            "namespace:ns1:ensure",
            "agent:a1:stop:1",
            "namespace:ns2:ensure"
        ],
        "one live claim per lane: the Namespace's and the Agent's lanes are separate"
    );
}

/// Records whether `publish` ran.
struct Publishes(AtomicUsize);

impl Reconciler for Publishes {
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
        self.0.fetch_add(1, Ordering::SeqCst);
        tx.execute(
            "UPDATE occ.namespaces_all SET status = 'ready' WHERE id = $1",
            &[&pass.claim.namespace_id],
        )?;
        Ok(())
    }
}

// Q6: once a claim is recovered and reclaimed, its old token can neither renew, complete,
// retry, defer nor fail the work, and nothing written through `Pass::fenced` or `finalize`
// is published: neither lifecycle state nor audit evidence.
#[test]
fn a_stale_claim_token_can_publish_nothing() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let o = opts(5);
    let id = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin"))
        .unwrap()
        .id;
    let stale = work_claim(&mut c, &o).unwrap().unwrap();
    expire_leases(&mut c);
    // While expired but not yet recovered, the old lease already fences every transition.
    assert!(work_heartbeat(&mut c, &stale, &o)
        .unwrap_err()
        .is_claim_lost());
    assert!(work_complete(&mut c, &stale, "DONE", None)
        .unwrap_err()
        .is_claim_lost());
    assert_eq!(work_recover_stale(&mut c, &o).unwrap().requeued, 1);
    let current = work_claim(&mut c, &o).unwrap().unwrap();
    assert_ne!(current.token, stale.token);
    assert_eq!(current.attempt, 2);

    assert!(work_heartbeat(&mut c, &stale, &o)
        .unwrap_err()
        .is_claim_lost());
    assert!(work_lock_claim(&mut c, &stale).unwrap_err().is_claim_lost());
    assert!(work_complete(&mut c, &stale, "DONE", None)
        .unwrap_err()
        .is_claim_lost());
    assert!(work_retry(&mut c, &stale, "DEPENDENCY_UNAVAILABLE", &o)
        .unwrap_err()
        .is_claim_lost());
    assert!(
        work_defer(&mut c, &stale, "PENDING", Duration::ZERO, true, None)
            .unwrap_err()
            .is_claim_lost()
    );
    assert!(work_fail(&mut c, &stale, "BROKEN", None, None)
        .unwrap_err()
        .is_claim_lost());

    let (ctx, _events) = context(&db, o.lease, o.max_attempts);
    let lease = LeaseState::new(&stale, Instant::now(), o.lease);
    let pass = Pass {
        claim: &stale,
        ctx: &ctx,
        lease: &lease,
    };
    let mut ran = false;
    let fenced = pass.fenced(|tx| {
        ran = true;
        tx.execute(
            "INSERT INTO occ.audit_events (installation_id, namespace_id, kind, actor_id, action,
                 resource_kind, resource_id, outcome, work_id)
             VALUES ('inst', 'ns1', 'mutation', 'admin', 'test.stale', 'namespace', 'ns1', 'success', $1)",
            &[&stale.id],
        )?;
        Ok(())
    });
    assert!(matches!(fenced, Err(PassError::ClaimLost)), "{fenced:?}");
    assert!(!ran, "the fenced body never runs for a stale claim");
    let publishes = Publishes(AtomicUsize::new(0));
    let finalized = finalize(&pass, &publishes, Report::<()>::success("DONE"));
    assert!(
        matches!(finalized, Err(PassError::ClaimLost)),
        "{finalized:?}"
    );
    assert_eq!(publishes.0.load(Ordering::SeqCst), 0);
    assert!(matches!(
        pass.before_effect(),
        Err(PassError::Lost(LossCause::RenewalRefused))
    ));

    let audits: i64 = scalar(&mut c, "SELECT count(*) FROM occ.audit_events");
    assert_eq!(audits, 0, "no audit evidence from the stale claim");
    let status: String = scalar(
        &mut c,
        "SELECT status FROM occ.namespaces_all WHERE id = 'ns1'",
    );
    assert_eq!(status, "provisioning");
    let row = c
        .query_one(
            "SELECT state, claim_token::text, attempt_count FROM occ.work_status WHERE id = $1",
            &[&id],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "claimed");
    assert_eq!(
        row.get::<_, String>(1),
        current.token,
        "the live claim is untouched"
    );
    assert_eq!(
        evidence(&mut c, id),
        [(1, "LEASE_EXPIRED".to_string(), "lease_expired".to_string())]
    );

    // The live claim publishes through the same path.
    let lease = LeaseState::new(&current, Instant::now(), o.lease);
    let pass = Pass {
        claim: &current,
        ctx: &ctx,
        lease: &lease,
    };
    finalize(&pass, &publishes, Report::<()>::success("DONE")).unwrap();
    assert_eq!(publishes.0.load(Ordering::SeqCst), 1);
    assert_eq!(row_state(&mut c, id).0, "succeeded");
    let status: String = scalar(
        &mut c,
        "SELECT status FROM occ.namespaces_all WHERE id = 'ns1'",
    );
    assert_eq!(status, "ready");
}

// Q8: a deferral refunds the attempt its claim consumed, so observing pending convergence
// any number of times never exhausts the failure budget.
#[test]
fn defer_refunds_the_attempt_and_never_exhausts_the_budget() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let o = opts(2);
    let id = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin"))
        .unwrap()
        .id;
    let claim = work_claim(&mut c, &o).unwrap().unwrap();
    work_defer(
        &mut c,
        &claim,
        "NAMESPACE_PENDING",
        Duration::from_secs(60),
        true,
        None,
    )
    .unwrap();
    let (state, attempts, _) = row_state(&mut c, id);
    assert_eq!((state.as_str(), attempts), ("queued", 0));
    assert!(
        work_claim(&mut c, &o).unwrap().is_none(),
        "deferred for a minute"
    );
    let later: bool = scalar(
        &mut c,
        "SELECT available_at > clock_timestamp() + interval '50 s' FROM occ.work",
    );
    assert!(later);
    for _ in 0..5 {
        c.batch_execute("UPDATE occ.work SET available_at = clock_timestamp()")
            .unwrap();
        let claim = work_claim(&mut c, &o).unwrap().unwrap();
        assert_eq!(
            claim.attempt, 1,
            "every claim after a deferral is the first attempt"
        );
        work_defer(
            &mut c,
            &claim,
            "NAMESPACE_PENDING",
            Duration::ZERO,
            false,
            None,
        )
        .unwrap();
        assert_eq!(
            work_recover_stale(&mut c, &o).unwrap(),
            Recovered::default()
        );
    }
    assert_eq!(
        evidence(&mut c, id),
        [(1, "NAMESPACE_PENDING".to_string(), "deferred".to_string())],
        "a deferral records evidence only when asked to"
    );
}

// Q7: a retry spends the attempt and backs off exponentially; at the attempt limit it fails.
#[test]
fn retry_backs_off_and_fails_at_the_attempt_limit() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let o = opts(3);
    let id = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin"))
        .unwrap()
        .id;
    let mut delays = Vec::new();
    for attempt in 1..=2 {
        let claim = work_claim(&mut c, &o).unwrap().unwrap();
        assert_eq!(claim.attempt, attempt);
        assert_eq!(
            work_retry(&mut c, &claim, "DEPENDENCY_UNAVAILABLE", &o).unwrap(),
            RetryOutcome::Queued
        );
        assert!(work_claim(&mut c, &o).unwrap().is_none(), "backing off");
        let delay: f64 = scalar(
            &mut c,
            "SELECT extract(epoch FROM available_at - clock_timestamp())::float8 FROM occ.work",
        );
        delays.push(delay);
        c.batch_execute("UPDATE occ.work SET available_at = clock_timestamp()")
            .unwrap();
    }
    assert!(
        delays[0] > 0.5 && delays[0] <= 1.0,
        "first backoff ~1 s: {delays:?}"
    );
    assert!(
        delays[1] > 1.5 && delays[1] <= 2.0,
        "second backoff ~2 s: {delays:?}"
    );
    let claim = work_claim(&mut c, &o).unwrap().unwrap();
    assert_eq!(claim.attempt, 3);
    assert_eq!(
        work_retry(&mut c, &claim, "DEPENDENCY_UNAVAILABLE", &o).unwrap(),
        RetryOutcome::Failed
    );
    assert_eq!(
        row_state(&mut c, id),
        (
            "failed_permanent".into(),
            3,
            Some("DEPENDENCY_UNAVAILABLE".into())
        )
    );
    let outcomes: Vec<String> = evidence(&mut c, id).into_iter().map(|e| e.2).collect();
    assert_eq!(outcomes, ["retry", "retry", "failed"]);
}

// Q10: an expired lease returns the work to the queue with LEASE_EXPIRED evidence and the
// attempt kept; the Namespace it creates stays provisioning.
#[test]
fn recovery_requeues_an_expired_lease_and_keeps_the_attempt() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let o = opts(3);
    let id = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin"))
        .unwrap()
        .id;
    work_claim(&mut c, &o).unwrap().unwrap();
    assert_eq!(
        work_recover_stale(&mut c, &o).unwrap(),
        Recovered::default(),
        "lease live"
    );
    expire_leases(&mut c);
    assert_eq!(
        work_recover_stale(&mut c, &o).unwrap(),
        Recovered {
            requeued: 1,
            failed: 0,
            failed_namespaces: 0,
            failed_policies: 0
        }
    );
    assert_eq!(row_state(&mut c, id), ("queued".into(), 1, None));
    assert_eq!(
        evidence(&mut c, id),
        [(1, "LEASE_EXPIRED".to_string(), "lease_expired".to_string())]
    );
    let status: String = scalar(
        &mut c,
        "SELECT status FROM occ.namespaces_all WHERE id = 'ns1'",
    );
    assert_eq!(
        status, "provisioning",
        "retryable recovery leaves the Namespace"
    );
    let audits: i64 = scalar(&mut c, "SELECT count(*) FROM occ.audit_events");
    assert_eq!(audits, 0);
    let claim = work_claim(&mut c, &o).unwrap().unwrap();
    assert_eq!(claim.attempt, 2, "the expired attempt stays spent");
}

// Q10: an expired lease on the final attempt fails the work, and a Namespace creation's
// provisioning Namespace becomes failed with its audit evidence in the same statement.
#[test]
fn recovery_at_the_final_attempt_fails_the_work_and_its_namespace() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    insert_namespace(&mut c, "ns2", "ready");
    let o = opts(1);
    let ensure = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin"))
        .unwrap()
        .id;
    let delete = work_enqueue(&mut c, &NewWork::namespace_delete("ns2", None, "admin"))
        .unwrap()
        .id;
    work_claim(&mut c, &o).unwrap().unwrap();
    work_claim(&mut c, &o).unwrap().unwrap();
    expire_leases(&mut c);
    assert_eq!(
        work_recover_stale(&mut c, &o).unwrap(),
        Recovered {
            requeued: 0,
            failed: 2,
            failed_namespaces: 1,
            failed_policies: 0
        }
    );
    assert_eq!(
        row_state(&mut c, ensure),
        ("failed_permanent".into(), 1, Some("LEASE_EXPIRED".into()))
    );
    assert_eq!(row_state(&mut c, delete).0, "failed_permanent");
    assert_eq!(
        evidence(&mut c, ensure),
        [(1, "LEASE_EXPIRED".to_string(), "failed".to_string())]
    );
    let status: String = scalar(
        &mut c,
        "SELECT status FROM occ.namespaces_all WHERE id = 'ns1'",
    );
    assert_eq!(status, "failed");
    let status: String = scalar(
        &mut c,
        "SELECT status FROM occ.namespaces_all WHERE id = 'ns2'",
    );
    assert_eq!(
        status, "ready",
        "only a Namespace creation fails its Namespace"
    );
    let audit = c
        .query_one(
            "SELECT namespace_id, resource_id, outcome, reason_code, work_id, actor_id
             FROM occ.audit_events",
            &[],
        )
        .unwrap();
    assert_eq!(audit.get::<_, String>(0), "ns1");
    assert_eq!(audit.get::<_, String>(1), "ns1");
    assert_eq!(audit.get::<_, String>(2), "failure");
    assert_eq!(
        audit.get::<_, Option<String>>(3).as_deref(),
        Some("LEASE_EXPIRED")
    );
    assert_eq!(audit.get::<_, Option<i64>>(4), Some(ensure));
    assert_eq!(audit.get::<_, String>(5), "admin");
}

// Q10: queued work whose attempts are exhausted fails (and fails its provisioning Namespace).
#[test]
fn recovery_fails_queued_work_with_exhausted_attempts() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let o = opts(3);
    let id = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin"))
        .unwrap()
        .id;
    c.batch_execute("UPDATE occ.work SET attempt_count = 3")
        .unwrap();
    assert_eq!(
        work_recover_stale(&mut c, &o).unwrap(),
        Recovered {
            requeued: 0,
            failed: 1,
            failed_namespaces: 1,
            failed_policies: 0
        }
    );
    assert_eq!(
        row_state(&mut c, id),
        (
            "failed_permanent".into(),
            3,
            Some("ATTEMPTS_EXHAUSTED".into())
        )
    );
    let status: String = scalar(
        &mut c,
        "SELECT status FROM occ.namespaces_all WHERE id = 'ns1'",
    );
    assert_eq!(status, "failed");
    let audits: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.audit_events WHERE reason_code = 'ATTEMPTS_EXHAUSTED'",
    );
    assert_eq!(audits, 1);
    assert!(work_claim(&mut c, &o).unwrap().is_none());
}

// W5: the schema refuses rows that could stop the queue: non-finite times and
// leases more than an hour past their last transition.
#[test]
fn poison_times_and_unbounded_leases_are_refused_by_the_schema() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    let w = work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    for sql in [
        "UPDATE occ.work SET created_at = '-infinity'",
        "UPDATE occ.work SET available_at = 'infinity'",
        "UPDATE occ.namespaces_all SET deleted_at = 'infinity'",
        "INSERT INTO occ.work_attempts (work_id, attempt, code, outcome, at)
         SELECT id, 1, 'X', 'retry', '-infinity' FROM occ.work",
        "UPDATE occ.work_lanes SET claim_id = head_id, claim_token = gen_random_uuid(), claimed_at = now(),
             renewed_at = now(), lease_expires_at = 'infinity', claim_attempt = 1",
        "UPDATE occ.work_lanes SET claim_id = head_id, claim_token = gen_random_uuid(), claimed_at = now(),
             renewed_at = now(), lease_expires_at = now() + interval '2 hours', claim_attempt = 1",
    ] {
        let (state, _) = refused(&mut c, sql);
        assert_eq!(state, SqlState::CHECK_VIOLATION, "{sql}");
    }
    assert_eq!(row_state(&mut c, w.id).0, "queued");
}

// W5: rows forced in with the checks disabled stop nothing: a queued row born
// at '-infinity' is skipped by the claim, a claim leased until 'infinity' is recovered, and the
// rest of the queue drains.
#[test]
fn rows_forced_past_the_checks_never_stop_the_queue() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for ns in ["poison", "held", "ns1", "ns2"] {
        insert_namespace(&mut c, ns, "provisioning");
        work_enqueue(&mut c, &NewWork::namespace_ensure(ns, "admin")).unwrap();
    }
    c.batch_execute(
        "ALTER TABLE occ.work DROP CONSTRAINT work_times_finite;
         ALTER TABLE occ.work_lanes DROP CONSTRAINT work_lanes_claim_bounded;
         UPDATE occ.work SET created_at = '-infinity' WHERE namespace_id = 'poison';
         UPDATE occ.work_lanes SET claim_id = head_id, claim_token = gen_random_uuid(),
             claimed_at = now(), renewed_at = now(), lease_expires_at = 'infinity', claim_attempt = 1
          WHERE lane = 'namespace:held';
         ALTER TABLE occ.work ADD CONSTRAINT work_times_finite CHECK (isfinite(created_at)) NOT VALID;",
    )
    .unwrap();
    let recovered = work_recover_stale(&mut c, &opts(5)).unwrap();
    assert_eq!(recovered.requeued, 1, "the infinite lease is recovered");
    let mut claimed = Vec::new();
    while let Some(claim) = work_claim(&mut c, &opts(5)).unwrap() {
        work_complete(&mut c, &claim, "DONE", None).unwrap();
        claimed.push(claim.namespace_id);
    }
    claimed.sort();
    assert_eq!(claimed, ["held", "ns1", "ns2"]);
    let poison: String = scalar(
        &mut c,
        "SELECT state FROM occ.work_status WHERE namespace_id = 'poison'",
    );
    assert_eq!(poison, "queued", "skipped, not fatal");
}

// W3: one failed renewal (a database error) is retried within the lease
// before the pass is cancelled: it only warns; the next renewal confirms the lease. Two in a
// row cancel the pass with CLAIM_RENEWAL_FAILED.
#[test]
fn one_failed_renewal_is_retried_within_the_lease_and_a_second_in_a_row_cancels() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    let (ctx, events) = context(&db, Duration::from_secs(30), 5);
    let sent = Instant::now();
    let claim = work_claim(&mut c, &ctx.queue).unwrap().expect("a claim");
    let lease = LeaseState::new(&claim, sent, ctx.queue.lease);
    // Renewals numbered by a sequence (never rolled back) fail up to `fail_renewals.upto`.
    c.batch_execute(
        "CREATE SEQUENCE public.renewals;
         CREATE TABLE public.fail_renewals (upto bigint NOT NULL);
         INSERT INTO public.fail_renewals VALUES (1);
         CREATE FUNCTION public.fail_renewal() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('public.renewals') <= (SELECT upto FROM public.fail_renewals) THEN
                 RAISE EXCEPTION 'renewal refused by the test';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER fail_renewal BEFORE UPDATE OF lease_expires_at ON occ.work_lanes
             FOR EACH ROW WHEN (OLD.claim_id IS NOT NULL AND NEW.claim_id IS NOT NULL)
             EXECUTE FUNCTION public.fail_renewal();",
    )
    .unwrap();

    lease
        .renew(&mut c, &claim, &ctx.queue, &ctx.events)
        .expect("one failure only warns");
    assert_eq!(lease.cancel.cause(), None);
    let warnings = events.named("worker.claim-renewal-warning");
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0]["code"], "CLAIM_RENEWAL_FAILED");
    assert_eq!(warnings[0]["retrying"], true);
    lease
        .renew(&mut c, &claim, &ctx.queue, &ctx.events)
        .expect("the retry confirms the lease");
    assert_eq!(lease.cancel.cause(), None);

    c.batch_execute(
        "UPDATE public.fail_renewals SET upto = (SELECT last_value FROM public.renewals) + 2",
    )
    .unwrap();
    lease
        .renew(&mut c, &claim, &ctx.queue, &ctx.events)
        .expect("a new first failure only warns");
    let e = lease
        .renew(&mut c, &claim, &ctx.queue, &ctx.events)
        .unwrap_err();
    assert!(
        matches!(e, PassError::Lost(LossCause::RenewalFailed)),
        "{e:?}"
    );
    assert_eq!(lease.cancel.cause(), Some(LossCause::RenewalFailed));
}
