//! Credential withdrawal (SPEC §13, E1-E13, E20) with a real worker and the scripted driver:
//! per-requester authorization, the detach loop and its refusals, the fenced settle with its
//! reassigned denials, the row stamps and audits, and the recovery series on the database
//! clock, also after stale-claim recovery.
//!
//! Setup goes through `Rig` alone: credential sources by `occ.credential_source_create`, an
//! ordinary deployment whose snapshot is then rewritten, withdrawal rows inserted and work
//! enqueued by `occ.credential_withdrawal_enqueue`, until admission writes them itself.

use crate::agent::{evidence, fixture, user, work, Fixture};
use crate::scripted::{quiet, run_captured, run_until, Opts, ScriptedDriver};
use crate::support::Captured;
use occ_worker::compute::{ComputeError, CredentialDetach};
use postgres::Client;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The Credential Gateway the tests' Installation selects; every source names it.
const GATEWAY: &str = "gw-1";
const CALL: &str = "withdraw_credential_source";
const ACTION: &str = "openclaw.agents.lifecycle.credentials_withdraw";

/// An active revision whose snapshot holds `sources`.
struct Rig {
    f: Fixture,
    rev: String,
}

impl Rig {
    /// A deployed, active revision of `fixture()`'s Agent whose snapshot holds the sources
    /// `(id, kind)`, created ready and owned by `GATEWAY`; with `harness`, its harness auth is
    /// that `model_key` source.
    fn new(sources: &[(&str, &str)], harness: Option<&str>) -> Rig {
        let f = fixture();
        let mut c = f.db.client();
        for (id, kind) in sources {
            c.execute(
                "SELECT occ.credential_source_create('ns1', $1, $2, $3, 'credential_gateway', $4, NULL, 'admin')",
                &[id, kind, &format!("ns1/{id}/key"), &GATEWAY],
            )
            .unwrap();
        }
        let rev = crate::agent::deploy(&mut c, &f.agent);
        run_until(&f.db, Arc::new(ScriptedDriver::new()), quiet);
        let snapshot: Vec<Value> = sources
            .iter()
            .map(|(id, kind)| {
                json!({"sourceId": id, "credentialGatewayId": GATEWAY, "kind": kind,
                       "driverId": GATEWAY, "backendRef": format!("ns1/{id}/key")})
            })
            .collect();
        let auth = harness.map(
            |h| json!({"method": "credential_source", "sourceId": h, "credentialGatewayId": GATEWAY}),
        );
        // Revisions are immutable: the guard trigger is bypassed for this one statement
        // (CHECK constraints still apply).
        let mut tx = c.transaction().unwrap();
        tx.batch_execute("SET LOCAL session_replication_role = replica")
            .unwrap();
        tx.execute(
            "UPDATE occ.agent_revisions SET credential_sources = $2,
                    harness_auth = coalesce($3, harness_auth)
             WHERE id = $1",
            &[&rev, &Value::Array(snapshot), &auth],
        )
        .unwrap();
        tx.commit().unwrap();
        Rig { f, rev }
    }

    fn client(&self) -> Client {
        self.f.db.client()
    }

    /// Pending rows `(source, requester)` and one withdrawal work by `actor`; its key.
    fn request(&self, rows: &[(&str, &str)], actor: &str) -> String {
        let mut c = self.client();
        for (source, requester) in rows {
            c.execute(
                "INSERT INTO occ.credential_withdrawals (namespace_id, agent_id, revision_id, source_id, requested_by)
                 VALUES ('ns1', $1, $2, $3, $4)",
                &[&self.f.agent, &self.rev, source, requester],
            )
            .unwrap();
        }
        c.query_one(
            "SELECT occ.credential_withdrawal_enqueue('ns1', $1, $2, $3, NULL, 0)",
            &[&self.f.agent, &self.rev, &actor],
        )
        .unwrap()
        .get(0)
    }

    /// (state, last reason, revoked) of one row.
    fn row(&self, source: &str) -> (String, Option<String>, bool) {
        let r = self
            .client()
            .query_one(
                "SELECT state, last_reason, revoked_at IS NOT NULL FROM occ.credential_withdrawals
                 WHERE revision_id = $1 AND source_id = $2",
                &[&self.rev, &source],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    }

    /// (kind, outcome, actor, reason code, details) of every withdrawal audit, oldest first.
    fn audits(&self) -> Vec<(String, String, String, Option<String>, Value)> {
        self.client()
            .query(
                "SELECT kind, outcome, actor_id, reason_code, details FROM occ.audit_events
                 WHERE action = $1 ORDER BY id",
                &[&ACTION],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect()
    }

    /// The keys of the revision's withdrawal works with their delay from now in ms (database
    /// clock), oldest first.
    fn works(&self) -> Vec<(String, String, i64)> {
        self.client()
            .query(
                "SELECT idempotency_key, state,
                        (extract(epoch FROM available_at - clock_timestamp()) * 1000)::bigint
                 FROM occ.work WHERE revision_id = $1 AND agent_target = 'credential_withdrawal'
                 ORDER BY id",
                &[&self.rev],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// Makes `key`'s next claim its last attempt.
    fn last_attempt(&self, key: &str) {
        self.client()
            .execute(
                "UPDATE occ.work SET attempt_count = 4 WHERE idempotency_key = $1",
                &[&key],
            )
            .unwrap();
    }

    fn target(&self, source: &str) -> String {
        format!("{}/{source}", self.rev)
    }
}

fn opts() -> Opts {
    Opts {
        credential_gateway: Some(GATEWAY),
        ..Opts::default()
    }
}

/// Runs a worker until `key` is terminal and no withdrawal work is due.
fn run(rig: &Rig, driver: &Arc<ScriptedDriver>, opts: Opts, key: &str) -> Captured {
    let rev = rig.rev.clone();
    run_captured(&rig.f.db, driver.clone(), opts, |c| {
        let state = crate::support::work_state(c, key).0;
        let due: i64 = crate::support::one(
            c,
            "SELECT count(*) FROM occ.work_status WHERE revision_id = $1
               AND agent_target = 'credential_withdrawal'
               AND (state = 'claimed' OR (state = 'queued' AND available_at <= clock_timestamp()))",
            &[&rev],
        );
        (state == "succeeded" || state == "failed_permanent") && due == 0
    })
}

fn state(rig: &Rig, key: &str) -> (String, Option<String>) {
    let (state, code, _, _) = work(&mut rig.client(), key);
    (state, code)
}

fn completed(events: &Captured, key: &str) -> Vec<Value> {
    events
        .named("worker.completed")
        .into_iter()
        .filter(|e| e["workId"] == key)
        .collect()
}

fn s(v: &str) -> String {
    v.to_string()
}

#[test]
fn e4_a_per_requester_denial_leaves_the_other_rows_revoked_and_audited() {
    let rig = Rig::new(
        &[("tool-a", "tool"), ("tool-b", "tool"), ("tool-c", "tool")],
        None,
    );
    let mut c = rig.client();
    user(&mut c, "bob", "viewer");
    // The claim's actor may operate the Agent; neither bob nor a removed identity may.
    let key = rig.request(
        &[("tool-a", "admin"), ("tool-b", "bob"), ("tool-c", "ghost")],
        "admin",
    );
    let driver = Arc::new(ScriptedDriver::new());
    let events = run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("failed_permanent"), Some(s("AUTHORIZATION_DENIED")))
    );
    assert_eq!(driver.calls_of(CALL), [rig.target("tool-a")]);
    assert_eq!(
        rig.row("tool-a"),
        (s("revoked"), Some(s("CREDENTIALS_WITHDRAWN")), true)
    );
    assert_eq!(
        rig.row("tool-b"),
        (s("pending"), Some(s("AUTHORIZATION_DENIED")), false)
    );
    assert_eq!(
        rig.row("tool-c"),
        (s("pending"), Some(s("ACTOR_REVOKED")), false)
    );
    let audits = rig.audits();
    assert_eq!(audits.len(), 3, "{audits:?}");
    let (kind, outcome, actor, code, details) = &audits[0];
    assert_eq!(
        (
            kind.as_str(),
            outcome.as_str(),
            actor.as_str(),
            code.as_deref()
        ),
        (
            "mutation",
            "success",
            "admin",
            Some("CREDENTIALS_WITHDRAWN")
        )
    );
    assert_eq!(
        details,
        &json!({"computeDriverId": "scripted", "reasonCode": "CREDENTIALS_WITHDRAWN",
                "revisionId": rig.rev, "credentialSourceIds": ["tool-a"]})
    );
    for ((kind, outcome, actor, code, details), (who, why, reason)) in audits[1..].iter().zip([
        ("bob", "AUTHORIZATION_DENIED", "NO_MATCHING_BINDING"),
        ("ghost", "ACTOR_REVOKED", "NO_IDENTITY"),
    ]) {
        assert_eq!(
            (
                kind.as_str(),
                outcome.as_str(),
                actor.as_str(),
                code.as_deref()
            ),
            ("authorization_denial", "denied", who, Some(why))
        );
        assert_eq!(details["decisionReason"], reason);
        assert_eq!(details["authorization"]["principalId"], who);
        assert_eq!(details["authorization"]["action"], "operate");
        assert_eq!(details["reasonCode"], why);
    }
    // A denial that decides the outcome: permanent, hinted, no recovery series.
    let done = completed(&events, &key);
    assert_eq!(done.last().unwrap()["hintCode"], "GRANT_AND_REPLAY");
    assert_eq!(rig.works().len(), 1);
}

#[test]
fn e6_absent_counts_as_revoked() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_detach(&rig.rev, "tool-a", vec![CredentialDetach::Absent]);
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("succeeded"), Some(s("CREDENTIALS_WITHDRAWN")))
    );
    assert_eq!(driver.calls_of(CALL), [rig.target("tool-a")]);
    assert_eq!(
        rig.row("tool-a"),
        (s("revoked"), Some(s("CREDENTIALS_WITHDRAWN")), true)
    );
    let audits = rig.audits();
    assert_eq!(audits.len(), 1);
    assert_eq!(
        (audits[0].1.as_str(), audits[0].2.as_str()),
        ("success", "admin")
    );
}

#[test]
fn e6_a_refusal_mid_list_keeps_earlier_revocations_and_ends_the_loop() {
    let rig = Rig::new(
        &[("tool-a", "tool"), ("tool-b", "tool"), ("tool-c", "tool")],
        None,
    );
    let mut c = rig.client();
    user(&mut c, "carol", "agent-operator");
    let key = rig.request(
        &[
            ("tool-a", "admin"),
            ("tool-b", "carol"),
            ("tool-c", "admin"),
        ],
        "admin",
    );
    let driver = Arc::new(ScriptedDriver::new());
    driver.fail(
        CALL,
        &rig.target("tool-b"),
        ComputeError::permanent("CREDENTIAL_WITHDRAWAL_MISCONFIGURED", "compute", None),
    );
    let events = run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (
            s("failed_permanent"),
            Some(s("CREDENTIAL_WITHDRAWAL_MISCONFIGURED"))
        )
    );
    assert_eq!(
        driver.calls_of(CALL),
        [rig.target("tool-a"), rig.target("tool-b")]
    );
    assert_eq!(
        rig.row("tool-a"),
        (s("revoked"), Some(s("CREDENTIALS_WITHDRAWN")), true)
    );
    for source in ["tool-b", "tool-c"] {
        assert_eq!(
            rig.row(source),
            (
                s("pending"),
                Some(s("CREDENTIAL_WITHDRAWAL_MISCONFIGURED")),
                false
            )
        );
    }
    // The revocation, then one failure per requester of the unsettled rows.
    let audits: Vec<(String, String, Value)> = rig
        .audits()
        .into_iter()
        .map(|(_, outcome, actor, _, d)| (outcome, actor, d["credentialSourceIds"].clone()))
        .collect();
    assert_eq!(
        audits,
        [
            (s("success"), s("admin"), json!(["tool-a"])),
            (s("failure"), s("carol"), json!(["tool-b"])),
            (s("failure"), s("admin"), json!(["tool-c"])),
        ]
    );
    let done = completed(&events, &key);
    assert_eq!(done.last().unwrap()["hintCode"], "FIX_DRIVER_AND_REPLAY");
    // A refusal is not a terminal retry: no series.
    assert_eq!(rig.works().len(), 1);
}

#[test]
fn e6_requires_runtime_retirement_of_the_harness_source_while_the_others_revoke() {
    let rig = Rig::new(
        &[
            ("tool-a", "tool"),
            ("model", "model_key"),
            ("tool-b", "tool"),
        ],
        Some("model"),
    );
    let key = rig.request(
        &[("tool-a", "admin"), ("model", "admin"), ("tool-b", "admin")],
        "admin",
    );
    let driver = Arc::new(ScriptedDriver::new());
    driver.fail(
        CALL,
        &rig.target("model"),
        ComputeError::permanent(
            "CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT",
            "compute",
            None,
        ),
    );
    let events = run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (
            s("failed_permanent"),
            Some(s("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT"))
        )
    );
    // E3: the harness source first, then the others in admission order; the loop goes on.
    assert_eq!(
        driver.calls_of(CALL),
        [
            rig.target("model"),
            rig.target("tool-a"),
            rig.target("tool-b")
        ]
    );
    assert_eq!(
        rig.row("model"),
        (
            s("pending"),
            Some(s("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT")),
            false
        )
    );
    for source in ["tool-a", "tool-b"] {
        assert_eq!(
            rig.row(source),
            (s("revoked"), Some(s("CREDENTIALS_WITHDRAWN")), true)
        );
    }
    let audits: Vec<(String, Option<String>, Value)> = rig
        .audits()
        .into_iter()
        .map(|(_, outcome, _, code, d)| (outcome, code, d["credentialSourceIds"].clone()))
        .collect();
    assert_eq!(
        audits,
        [
            (
                s("success"),
                Some(s("CREDENTIALS_WITHDRAWN")),
                json!(["tool-a", "tool-b"])
            ),
            (
                s("failure"),
                Some(s("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT")),
                json!(["model"])
            ),
        ]
    );
    let done = completed(&events, &key);
    assert_eq!(done.last().unwrap()["hintCode"], "DEPLOY_NEW_REVISION");
}

#[test]
fn e10_a_replay_that_took_a_denied_row_over_turns_the_permanent_pass_into_a_retry() {
    let rig = Rig::new(&[("tool-a", "tool"), ("tool-b", "tool")], None);
    let mut c = rig.client();
    user(&mut c, "bob", "viewer");
    let key = rig.request(&[("tool-a", "bob"), ("tool-b", "admin")], "admin");
    let driver = Arc::new(ScriptedDriver::new());
    // While tool-b is detached, an operator who may operate the Agent replays tool-a.
    let (url, rev, b) = (rig.f.db.url.clone(), rig.rev.clone(), rig.target("tool-b"));
    driver.on_call(move |method, target| {
        if method == CALL && target == b {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute(
                "UPDATE occ.credential_withdrawals SET requested_by = 'admin'
                 WHERE revision_id = $1 AND source_id = 'tool-a'",
                &[&rev],
            )
            .unwrap();
        }
    });
    let events = run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("succeeded"), Some(s("CREDENTIALS_WITHDRAWN")))
    );
    assert_eq!(
        evidence(&mut c, &key),
        [
            "retry:CREDENTIAL_WITHDRAWAL_REASSIGNED",
            "succeeded:CREDENTIALS_WITHDRAWN"
        ]
    );
    let first = &completed(&events, &key)[0];
    assert_eq!(
        (&first["result"], &first["outcome"], &first["code"]),
        (
            &json!("permanent"),
            &json!("retry"),
            &json!("CREDENTIAL_WITHDRAWAL_REASSIGNED")
        )
    );
    assert!(first.get("hintCode").is_none());
    // tool-b in the first pass, tool-a for its new requester in the second.
    assert_eq!(
        driver.calls_of(CALL),
        [rig.target("tool-b"), rig.target("tool-a")]
    );
    for source in ["tool-a", "tool-b"] {
        assert_eq!(
            rig.row(source),
            (s("revoked"), Some(s("CREDENTIALS_WITHDRAWN")), true)
        );
    }
    // No denial is audited: the reassigned row is the new requester's.
    let audits: Vec<(String, String, String, Value)> = rig
        .audits()
        .into_iter()
        .map(|(kind, outcome, actor, _, d)| {
            (kind, outcome, actor, d["credentialSourceIds"].clone())
        })
        .collect();
    assert_eq!(
        audits,
        [
            (s("mutation"), s("success"), s("admin"), json!(["tool-b"])),
            (s("mutation"), s("success"), s("admin"), json!(["tool-a"])),
        ]
    );
}

#[test]
fn e7_pending_retries_until_revoked() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_detach(
        &rig.rev,
        "tool-a",
        vec![CredentialDetach::Pending, CredentialDetach::Revoked],
    );
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("succeeded"), Some(s("CREDENTIALS_WITHDRAWN")))
    );
    assert_eq!(
        evidence(&mut rig.client(), &key),
        [
            "retry:CREDENTIAL_WITHDRAWAL_PENDING",
            "succeeded:CREDENTIALS_WITHDRAWN"
        ]
    );
    assert_eq!(
        driver.calls_of(CALL),
        [rig.target("tool-a"), rig.target("tool-a")]
    );
    assert_eq!(
        rig.row("tool-a"),
        (s("revoked"), Some(s("CREDENTIALS_WITHDRAWN")), true)
    );
    // The pending pass audits nothing; the revoking one once.
    assert_eq!(rig.audits().len(), 1);
}

#[test]
fn e8_a_transient_error_retries_dependency_unavailable_and_stamps_the_unsettled_rows() {
    let rig = Rig::new(&[("tool-a", "tool"), ("tool-b", "tool")], None);
    let key = rig.request(&[("tool-a", "admin"), ("tool-b", "admin")], "admin");
    let driver = Arc::new(ScriptedDriver::new());
    driver.fail(
        CALL,
        &rig.target("tool-a"),
        ComputeError::transient("scripted", Some(503)),
    );
    // Stop after the first pass, holding its retry back until the next run.
    let due = |c: &mut Client, at: &str| {
        c.execute(
            &format!("UPDATE occ.work SET available_at = {at} WHERE idempotency_key = $1"),
            &[&key],
        )
        .unwrap();
    };
    let events = run_captured(&rig.f.db, driver.clone(), opts(), |c| {
        let first = evidence(c, &key).len() == 1;
        if first {
            due(c, "clock_timestamp() + interval '1 hour'");
        }
        first
    });
    assert_eq!(
        evidence(&mut rig.client(), &key),
        ["retry:DEPENDENCY_UNAVAILABLE"]
    );
    for source in ["tool-a", "tool-b"] {
        assert_eq!(
            rig.row(source),
            (s("pending"), Some(s("DEPENDENCY_UNAVAILABLE")), false)
        );
    }
    assert_eq!(driver.calls_of(CALL), [rig.target("tool-a")]);
    assert!(rig.audits().is_empty());
    let first = &completed(&events, &key)[0];
    assert_eq!(first["dependency"], "scripted");
    // The next pass withdraws both.
    due(&mut rig.client(), "clock_timestamp()");
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("succeeded"), Some(s("CREDENTIALS_WITHDRAWN")))
    );
}

#[test]
fn e2_a_revision_gone_is_retired_with_no_driver_call() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    // Only a row left behind can name it: foreign keys are bypassed for this statement.
    let mut c = rig.client();
    let mut tx = c.transaction().unwrap();
    tx.batch_execute("SET LOCAL session_replication_role = replica")
        .unwrap();
    tx.execute(
        "UPDATE occ.agents SET active_revision_id = NULL WHERE id = $1",
        &[&rig.f.agent],
    )
    .unwrap();
    tx.execute("DELETE FROM occ.agent_revisions WHERE id = $1", &[&rig.rev])
        .unwrap();
    tx.commit().unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("succeeded"), Some(s("WITHDRAWAL_REVISION_RETIRED")))
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    assert!(rig.audits().is_empty());
}

#[test]
fn e2_an_agent_gone_is_retired_with_no_driver_call() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    // Only a row left behind can name it: foreign keys are bypassed for this statement.
    let mut c = rig.client();
    let mut tx = c.transaction().unwrap();
    tx.batch_execute("SET LOCAL session_replication_role = replica")
        .unwrap();
    tx.execute("DELETE FROM occ.agents WHERE id = $1", &[&rig.f.agent])
        .unwrap();
    tx.commit().unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("succeeded"), Some(s("WITHDRAWAL_REVISION_RETIRED")))
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    assert!(rig.audits().is_empty());
}

#[test]
fn e3_nothing_pending_is_withdrawn_with_no_driver_call() {
    let rig = Rig::new(&[("tool-a", "tool"), ("tool-b", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    rig.client()
        .execute(
            "UPDATE occ.credential_withdrawals SET state = 'revoked', revoked_at = now(),
                    last_reason = 'CREDENTIALS_WITHDRAWN', last_at = now()
             WHERE revision_id = $1",
            &[&rig.rev],
        )
        .unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("succeeded"), Some(s("CREDENTIALS_WITHDRAWN")))
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    assert!(rig.audits().is_empty());
}

#[test]
fn e5_another_compute_is_a_mismatch_and_a_driver_without_the_call_is_unsupported() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    let other = Arc::new(ScriptedDriver::named("other"));
    let events = run(&rig, &other, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("failed_permanent"), Some(s("COMPUTE_DRIVER_MISMATCH")))
    );
    assert!(other.calls().is_empty());
    assert_eq!(
        rig.row("tool-a"),
        (s("pending"), Some(s("COMPUTE_DRIVER_MISMATCH")), false)
    );
    let done = completed(&events, &key);
    assert_eq!(
        done.last().unwrap()["hintCode"],
        "SELECT_ORIGINAL_COMPUTE_DRIVER"
    );
    let audits = rig.audits();
    assert_eq!(
        (audits.len(), audits[0].1.as_str(), audits[0].2.as_str()),
        (1, "failure", "admin")
    );

    let key = rig.request(&[], "admin");
    let docker_like = Arc::new(ScriptedDriver {
        credential_withdrawal: false,
        ..ScriptedDriver::default()
    });
    let events = run(&rig, &docker_like, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (
            s("failed_permanent"),
            Some(s("CREDENTIAL_WITHDRAWAL_UNSUPPORTED"))
        )
    );
    assert!(docker_like.calls().is_empty());
    assert_eq!(
        rig.row("tool-a"),
        (
            s("pending"),
            Some(s("CREDENTIAL_WITHDRAWAL_UNSUPPORTED")),
            false
        )
    );
    assert!(completed(&events, &key)
        .last()
        .unwrap()
        .get("hintCode")
        .is_none());
}

#[test]
fn e6_a_source_of_another_owner_or_changed_since_admission_is_an_ownership_conflict() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    let driver = Arc::new(ScriptedDriver::new());
    let other_gateway = Opts {
        credential_gateway: Some("gw-2"),
        ..Opts::default()
    };
    let events = run(&rig, &driver, other_gateway, &key);
    assert_eq!(
        state(&rig, &key),
        (
            s("failed_permanent"),
            Some(s("CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT"))
        )
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    assert_eq!(
        rig.row("tool-a"),
        (
            s("pending"),
            Some(s("CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT")),
            false
        )
    );
    assert_eq!(
        completed(&events, &key).last().unwrap()["hintCode"],
        "FIX_DRIVER_AND_REPLAY"
    );

    // The selected gateway, but the source no longer matches its snapshot.
    rig.client()
        .execute(
            "UPDATE occ.credential_sources SET backend_ref = 'ns1/moved/key' WHERE id = 'tool-a'",
            &[],
        )
        .unwrap();
    let key = rig.request(&[], "admin");
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (
            s("failed_permanent"),
            Some(s("CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT"))
        )
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
}

/// The recovery series' delay of each `n` (SPEC E12), in ms.
fn series_delay(n: u32) -> i64 {
    (30_000i64 << (n - 1).min(10)).min(300_000)
}

#[test]
fn e12_e20_a_terminal_retry_fails_permanent_and_queues_its_series_on_the_database_clock() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    rig.last_attempt(&key);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_detach(&rig.rev, "tool-a", vec![CredentialDetach::Pending]);
    let events = run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (
            s("failed_permanent"),
            Some(s("CREDENTIAL_WITHDRAWAL_PENDING"))
        )
    );
    let done = completed(&events, &key);
    assert_eq!(done.len(), 1);
    let e = &done[0];
    assert_eq!(e["operation"], "agent_revision.credential_withdrawal");
    assert_eq!(
        (&e["result"], &e["outcome"], &e["code"]),
        (
            &json!("retry"),
            &json!("permanent"),
            &json!("CREDENTIAL_WITHDRAWAL_PENDING")
        )
    );
    assert_eq!(
        (&e["namespaceId"], &e["agentId"], &e["revisionId"]),
        (&json!("ns1"), &json!(rig.f.agent), &json!(rig.rev))
    );
    assert_eq!(e["attempt"], 5);
    assert!(e.get("hintCode").is_none(), "{e}");
    let works = rig.works();
    assert_eq!(works.len(), 2);
    let (next, next_state, delay) = &works[1];
    assert_eq!(next, &format!("{key}:recovery:1"));
    assert_eq!(next_state, "queued");
    assert!(
        (series_delay(1) - 5_000..=series_delay(1)).contains(delay),
        "{delay}"
    );
    assert_eq!(
        rig.row("tool-a"),
        (
            s("pending"),
            Some(s("CREDENTIAL_WITHDRAWAL_PENDING")),
            false
        )
    );
    // The terminal retry is audited as a failure of the requester's row.
    let audits = rig.audits();
    assert_eq!(audits.len(), 1);
    assert_eq!(
        (audits[0].1.as_str(), audits[0].3.as_deref()),
        ("failure", Some("CREDENTIAL_WITHDRAWAL_PENDING"))
    );
}

#[test]
fn e12_the_series_doubles_to_five_minutes_and_ends_after_the_fifteenth() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    rig.last_attempt(&key);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_detach(&rig.rev, "tool-a", vec![CredentialDetach::Pending; 20]);
    // Each series is made due at once, its delay noted, and run to its last attempt.
    let delays: Mutex<Vec<(String, i64)>> = Mutex::default();
    let rev = rig.rev.clone();
    run_captured(
        &rig.f.db,
        driver.clone(),
        Opts {
            timeout: Duration::from_secs(90),
            ..opts()
        },
        |c| {
            for r in c
                .query(
                    "SELECT idempotency_key,
                            (extract(epoch FROM available_at - clock_timestamp()) * 1000)::bigint
                     FROM occ.work WHERE revision_id = $1 AND agent_target = 'credential_withdrawal'
                       AND state = 'queued' AND available_at > clock_timestamp()",
                    &[&rev],
                )
                .unwrap()
            {
                let key: String = r.get(0);
                delays.lock().unwrap().push((key.clone(), r.get(1)));
                c.execute(
                    "UPDATE occ.work SET available_at = clock_timestamp(), attempt_count = 4
                     WHERE idempotency_key = $1",
                    &[&key],
                )
                .unwrap();
            }
            let (failed, queued): (i64, i64) = {
                let r = c
                    .query_one(
                        "SELECT count(*) FILTER (WHERE state = 'failed_permanent'),
                                count(*) FILTER (WHERE state IN ('queued', 'claimed'))
                         FROM occ.work_status WHERE revision_id = $1
                           AND agent_target = 'credential_withdrawal'",
                        &[&rev],
                    )
                    .unwrap();
                (r.get(0), r.get(1))
            };
            failed == 16 && queued == 0
        },
    );
    let delays = delays.into_inner().unwrap();
    assert_eq!(delays.len(), 15, "{delays:?}");
    for (n, (next, delay)) in (1..=15).zip(&delays) {
        assert_eq!(next, &format!("{key}:recovery:{n}"));
        let expected = series_delay(n);
        assert!(
            (expected - 5_000..=expected).contains(delay),
            "series {n}: {delay} ms, expected {expected}"
        );
    }
    let works = rig.works();
    assert_eq!(works.len(), 16, "no series after the fifteenth");
    assert!(works
        .iter()
        .all(|(_, state, _)| state == "failed_permanent"));
    assert_eq!(driver.calls_of(CALL).len(), 16);
}

#[test]
fn e12_no_series_under_a_maintenance_interval() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    rig.last_attempt(&key);
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_secs(3600)),
        ..ScriptedDriver::default()
    });
    driver.script_detach(&rig.rev, "tool-a", vec![CredentialDetach::Pending]);
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (
            s("failed_permanent"),
            Some(s("CREDENTIAL_WITHDRAWAL_PENDING"))
        )
    );
    assert_eq!(rig.works().len(), 1, "{:?}", rig.works());
}

#[test]
fn e12_no_series_while_another_withdrawal_of_the_revision_is_outstanding() {
    let rig = Rig::new(&[("tool-a", "tool"), ("tool-b", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    rig.last_attempt(&key);
    // A replay's work, due later, is the revision's chain.
    let replay: String = rig
        .client()
        .query_one(
            "SELECT occ.credential_withdrawal_enqueue('ns1', $1, $2, 'admin', NULL, 3600000)",
            &[&rig.f.agent, &rig.rev],
        )
        .unwrap()
        .get(0);
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_detach(&rig.rev, "tool-a", vec![CredentialDetach::Pending]);
    run(&rig, &driver, opts(), &key);
    let keys: Vec<String> = rig.works().into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(keys, [key, replay]);
}

/// Claims `key` at its last attempt and lets its lease run out, as a worker that died would.
fn stale_at_last_attempt(rig: &Rig, key: &str) {
    rig.last_attempt(key);
    let mut c = rig.client();
    let options = occ_worker::queue::QueueOptions::new(Duration::from_secs(30), 5);
    let claim = occ_worker::queue::work_claim(&mut c, &options)
        .unwrap()
        .unwrap();
    assert_eq!((claim.key.as_str(), claim.attempt), (key, 5));
    c.batch_execute(
        "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() - interval '1 s'
         WHERE claim_id IS NOT NULL",
    )
    .unwrap();
}

#[test]
fn e13_stale_claim_recovery_fails_the_withdrawal_and_queues_its_series() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    stale_at_last_attempt(&rig, &key);
    let driver = Arc::new(ScriptedDriver::new());
    let next = format!("{key}:recovery:1");
    let rev = rig.rev.clone();
    run_captured(&rig.f.db, driver.clone(), opts(), |c| {
        c.query_opt(
            "SELECT 1 FROM occ.work WHERE idempotency_key = $1 AND revision_id = $2",
            &[&next, &rev],
        )
        .unwrap()
        .is_some()
    });
    assert_eq!(
        state(&rig, &key),
        (s("failed_permanent"), Some(s("LEASE_EXPIRED")))
    );
    let works = rig.works();
    assert_eq!(works.len(), 2);
    assert_eq!(works[1].0, next);
    assert!(
        (series_delay(1) - 5_000..=series_delay(1)).contains(&works[1].2),
        "{works:?}"
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());

    // None under a maintenance interval.
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    stale_at_last_attempt(&rig, &key);
    let driver = Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_secs(3600)),
        ..ScriptedDriver::default()
    });
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("failed_permanent"), Some(s("LEASE_EXPIRED")))
    );
    assert_eq!(rig.works().len(), 1, "{:?}", rig.works());
}

#[test]
fn e13_a_series_that_cannot_be_queued_is_said_as_worker_unavailable_and_the_others_still_are() {
    let rig = Rig::new(&[("tool-a", "tool")], None);
    let key = rig.request(&[("tool-a", "admin")], "admin");
    let mut c = rig.client();
    c.execute(
        "UPDATE occ.work SET state = 'failed_permanent', reason_code = 'LEASE_EXPIRED',
                completed_at = clock_timestamp()
         WHERE idempotency_key = $1",
        &[&key],
    )
    .unwrap();
    let id: i64 = crate::support::one(
        &mut c,
        "SELECT id FROM occ.work WHERE idempotency_key = $1",
        &[&key],
    );
    let (ctx, events) = crate::support::context(&rig.f.db, Duration::from_secs(30), 5);
    let failed = |key: &str| occ_worker::queue::FailedWork {
        operation: occ_worker::queue::Operation::CredentialWithdrawal,
        id,
        key: key.into(),
        namespace_id: "ns1".into(),
        agent_id: rig.f.agent.clone(),
    };
    // A key whose series PostgreSQL refuses (an <op> that is neither a UUID nor a known one),
    // then the work's own.
    let bogus = format!("agent_revision:{}:credential_withdrawal:bogus", rig.rev);
    occ_worker::reconcile::withdrawal::recover_series(&ctx, &[failed(&bogus), failed(&key)]);
    let errors = events.named("worker.error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["code"], "WORKER_UNAVAILABLE");
    assert_eq!(errors[0]["workId"], json!(bogus));
    assert_eq!(
        errors[0]["operation"],
        "agent_revision.credential_withdrawal"
    );
    let keys: Vec<String> = rig.works().into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(keys, [key.clone(), format!("{key}:recovery:1")]);
}

#[test]
fn e13_no_series_when_every_pending_row_awaits_replay() {
    let rig = Rig::new(&[("tool-a", "tool"), ("tool-b", "tool")], None);
    let key = rig.request(&[("tool-a", "bob"), ("tool-b", "admin")], "admin");
    rig.client()
        .execute(
            "UPDATE occ.credential_withdrawals
             SET last_reason = CASE source_id WHEN 'tool-a' THEN 'AUTHORIZATION_DENIED'
                                   ELSE 'CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT' END,
                 last_at = clock_timestamp()
             WHERE revision_id = $1",
            &[&rig.rev],
        )
        .unwrap();
    stale_at_last_attempt(&rig, &key);
    let driver = Arc::new(ScriptedDriver::new());
    run(&rig, &driver, opts(), &key);
    assert_eq!(
        state(&rig, &key),
        (s("failed_permanent"), Some(s("LEASE_EXPIRED")))
    );
    assert_eq!(rig.works().len(), 1, "{:?}", rig.works());
}

#[test]
fn e15_a_row_requested_while_a_pass_runs_gets_its_own_work_once_that_pass_ends() {
    // The request found the running work outstanding and queued nothing; the pass had loaded
    // its pending set before the row existed. Ending, it queues a fresh withdrawal by the
    // row's requester, which then revokes it.
    let rig = Rig::new(&[("tool-a", "tool"), ("tool-b", "tool")], None);
    let mut c = rig.client();
    user(&mut c, "carol", "agent-operator");
    let key = rig.request(&[("tool-a", "admin")], "admin");
    let driver = Arc::new(ScriptedDriver::new());
    let (url, agent, rev) = (rig.f.db.url.clone(), rig.f.agent.clone(), rig.rev.clone());
    let first = rig.target("tool-a");
    let added = Arc::new(Mutex::new(false));
    let once = added.clone();
    driver.on_call(move |method, target| {
        let mut done = once.lock().unwrap();
        if method == CALL && target == first && !*done {
            *done = true;
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute(
                "INSERT INTO occ.credential_withdrawals (namespace_id, agent_id, revision_id, source_id, requested_by)
                 VALUES ('ns1', $1, $2, 'tool-b', 'carol')",
                &[&agent, &rev],
            )
            .unwrap();
        }
    });
    run(&rig, &driver, opts(), &key);
    assert!(*added.lock().unwrap());
    assert_eq!(
        state(&rig, &key),
        (s("succeeded"), Some(s("CREDENTIALS_WITHDRAWN")))
    );
    let works = rig.works();
    assert_eq!(works.len(), 2, "{works:?}");
    let follow = &works[1].0;
    let actor: String = crate::support::one(
        &mut c,
        "SELECT actor_id FROM occ.work WHERE idempotency_key = $1",
        &[follow],
    );
    assert_eq!(actor, "carol");
    assert_eq!(
        rig.row("tool-b"),
        (s("revoked"), Some(s("CREDENTIALS_WITHDRAWN")), true)
    );
    assert_eq!(
        driver.calls_of(CALL),
        [rig.target("tool-a"), rig.target("tool-b")]
    );
}
