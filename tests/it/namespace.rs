//! Namespace admission (N1, N4, Q9) and the Namespace reconciler (N2-N5), driven pass by pass
//! against a real PostgreSQL and the scripted Compute Driver.

use crate::scripted::{ns_observation, ScriptedDriver};
use crate::support::{context_with, TestDb};
use occ_worker::compute::{ComputeError, FailureClass};
use occ_worker::queue::{self, Operation, QueueOptions};
use occ_worker::reconcile::namespace::NamespaceReconciler;
use occ_worker::reconcile::{self, Context, LeaseState, Pass, PassError, Registry};
use occ_worker::runtime::{RuntimeOptions, Worker};
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One test's world: a bootstrapped database (`admin` is installation-admin), the scripted
/// driver and a registry with the Namespace reconciler.
struct Harness {
    db: TestDb,
    driver: Arc<ScriptedDriver>,
    ctx: Arc<Context>,
    registry: Registry,
}

fn registry() -> Registry {
    let r = Arc::new(NamespaceReconciler);
    Registry::new()
        .with(Operation::NamespaceEnsure, r.clone())
        .with(Operation::NamespaceDelete, r)
}

impl Harness {
    fn new() -> Harness {
        Harness::with(3, Duration::from_secs(900))
    }

    fn with(max_attempts: i32, convergence_timeout: Duration) -> Harness {
        let db = TestDb::bootstrapped();
        let driver = Arc::new(ScriptedDriver::named("scripted-1"));
        let mut queue = QueueOptions::new(Duration::from_secs(30), max_attempts);
        queue.retry_base = Duration::ZERO;
        let ctx = context_with(db.pool(4), driver.clone())
            .queue(queue)
            .convergence(convergence_timeout)
            .build();
        Harness {
            db,
            driver,
            ctx,
            registry: registry(),
        }
    }

    fn sql(&self) -> Client {
        self.db.client()
    }

    fn admit(&self, query: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> Value {
        self.sql()
            .query_one(query, params)
            .unwrap_or_else(|e| panic!("{query}: {e}"))
            .get(0)
    }

    /// The refusal message of an admission that must fail.
    fn refused(&self, query: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> String {
        let e = self.sql().query_one(query, params).expect_err(query);
        e.as_db_error()
            .expect("a database error")
            .message()
            .to_string()
    }

    /// Namespace rows (deleted ones included) and work rows, together.
    fn namespace_and_work_rows(&self) -> i64 {
        self.sql()
            .query_one(
                "SELECT (SELECT count(*) FROM occ.namespaces_all) + (SELECT count(*) FROM occ.work)",
                &[],
            )
            .unwrap()
            .get(0)
    }

    fn batch(&self, sql: &str) {
        self.sql().batch_execute(sql).expect(sql);
    }

    /// Admits a Namespace; returns its id.
    fn create(&self, actor: &str, name: &str) -> String {
        let v = self.admit("SELECT occ.namespace_create($1, $2)", &[&actor, &name]);
        v["id"].as_str().unwrap().to_string()
    }

    /// Admits a Namespace and drives it to ready.
    fn ready(&self, name: &str) -> String {
        let ns = self.create("admin", name);
        let r = self.pass().expect("ensure pass");
        assert_eq!(r.code, "NAMESPACE_RECONCILED");
        self.driver.clear_calls();
        ns
    }

    /// Claims the next available work and runs one pass the way the runtime does; `None`
    /// when nothing is claimable. Deferred and retried work is made available at once.
    fn pass(&self) -> Option<reconcile::AnyReport> {
        self.try_pass().map(|r| r.expect("pass"))
    }

    fn try_pass(&self) -> Option<Result<reconcile::AnyReport, PassError>> {
        self.batch("UPDATE occ.work SET available_at = clock_timestamp() WHERE state = 'queued'");
        let claim = {
            let mut c = self.ctx.pool.get().unwrap();
            queue::work_claim(&mut *c, &self.ctx.queue).unwrap()?
        };
        let lease = LeaseState::new(&claim, Instant::now(), self.ctx.queue.lease);
        let pass = Pass {
            claim: &claim,
            ctx: &self.ctx,
            lease: &lease,
        };
        let reconciler = self.registry.get(claim.operation);
        Some(
            reconciler
                .reconcile(&pass)
                .or_else(|e| {
                    if e.is_claim_loss() {
                        Err(e)
                    } else {
                        Ok(reconcile::AnyReport::retry("DEPENDENCY_UNAVAILABLE"))
                    }
                })
                .and_then(|report| reconcile::finalize(&pass, &*reconciler, report)),
        )
    }

    /// (state, reason code, attempt count) of a work.
    fn work(&self, key: &str) -> (String, Option<String>, i32) {
        let row = self
            .sql()
            .query_one(
                "SELECT state, reason_code, attempt_count FROM occ.work_status WHERE idempotency_key = $1",
                &[&key],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    }

    fn status(&self, ns: &str) -> String {
        self.sql()
            .query_one(
                "SELECT status FROM occ.namespaces_all WHERE id = $1",
                &[&ns],
            )
            .unwrap()
            .get(0)
    }

    /// The reconciler's audit rows of a Namespace: (kind, action, outcome, reason, details),
    /// admission rows (no reason code, admission actions) excluded.
    fn audits(&self, ns: &str) -> Vec<(String, String, String, Option<String>, Value)> {
        self.sql()
            .query(
                "SELECT kind, action, outcome, reason_code, details FROM occ.audit_events
                 WHERE namespace_id = $1 AND (action LIKE 'openclaw.namespaces.lifecycle.%'
                       OR kind = 'authorization_denial')
                 ORDER BY id",
                &[&ns],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
            .collect()
    }

    fn audit_summary(&self, ns: &str) -> Vec<(String, String, String, String)> {
        self.audits(ns)
            .into_iter()
            .map(|(k, a, o, r, _)| (k, a, o, r.unwrap_or_default()))
            .collect()
    }

    /// The reconciler's audit rows of a Namespace's deletion only.
    fn delete_audits(&self, ns: &str) -> Vec<(String, String, String, Option<String>, Value)> {
        self.audits(ns)
            .into_iter()
            .filter(|(_, a, ..)| a.contains("delete"))
            .collect()
    }

    fn delete_audit_summary(&self, ns: &str) -> Vec<(String, String, String, String)> {
        self.delete_audits(ns)
            .into_iter()
            .map(|(k, a, o, r, _)| (k, a, o, r.unwrap_or_default()))
            .collect()
    }
}

fn row(kind: &str, action: &str, outcome: &str, code: &str) -> (String, String, String, String) {
    (kind.into(), action.into(), outcome.into(), code.into())
}

const ENSURE: &str = "openclaw.namespaces.lifecycle.ensure";
const DELETE: &str = "openclaw.namespaces.lifecycle.delete";

fn ensure_key(ns: &str) -> String {
    format!("namespace:{ns}:ensure")
}

fn delete_key(ns: &str) -> String {
    format!("namespace:{ns}:delete")
}

// Admission (N1, N4, Q9) ------------------------------------------------------------------

#[test]
fn n1_create_stores_provisioning_and_enqueues_ensure_in_one_transaction() {
    let h = Harness::new();
    let mut c = h.sql();
    let mut tx = c.transaction().unwrap();
    let v: Value = crate::support::one(
        &mut tx,
        "SELECT occ.namespace_create('admin', 'team-a')",
        &[],
    );
    let ns = v["id"].as_str().unwrap().to_string();
    assert!(ns.starts_with("ns-") && ns.len() == 11, "generated id {ns}");
    tx.rollback().unwrap();
    let count = h.namespace_and_work_rows();
    assert_eq!(count, 0, "a rolled-back admission leaves neither row");

    let ns = h.create("admin", "team-a");
    assert_eq!(h.status(&ns), "provisioning");
    assert_eq!(h.work(&ensure_key(&ns)), ("queued".into(), None, 0));
    let audit: (String, String, i64) = {
        let r = h
            .sql()
            .query_one(
                "SELECT kind, action, work_id FROM occ.audit_events WHERE resource_id = $1",
                &[&ns],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!(audit.0, "mutation");
    assert_eq!(audit.1, "openclaw.namespaces.create");
    let msg = h.refused("SELECT occ.namespace_create('admin', 'team-a')", &[]);
    assert!(msg.contains("already exists"), "{msg}");
}

// N1 (V18): a drawn id that is taken, by a live or a deleted Namespace, is drawn again; the
// creation fails with a clear error, writing nothing, only when eight draws in a row are taken.
#[test]
fn n1_create_draws_a_taken_id_again() {
    let h = Harness::new();
    let taken = h.create("admin", "team-a");
    // The draw made to collide: the taken id first, then a free one.
    h.batch(&format!(
        "CREATE SEQUENCE public.draws;
         CREATE OR REPLACE FUNCTION occ.namespace_new_id() RETURNS text LANGUAGE sql VOLATILE
             RETURN CASE WHEN nextval('public.draws') = 1 THEN '{taken}' ELSE 'ns-0000000b' END;"
    ));
    let ns = h.create("admin", "team-b");
    assert_eq!(ns, "ns-0000000b");
    assert_eq!(h.status(&ns), "provisioning");
    assert_eq!(h.work(&ensure_key(&ns)), ("queued".into(), None, 0));
    assert_eq!(
        h.status(&taken),
        "provisioning",
        "the taken id's Namespace is untouched"
    );

    // Every draw taken: refused, and nothing of it written.
    h.batch(&format!(
        "CREATE OR REPLACE FUNCTION occ.namespace_new_id() RETURNS text LANGUAGE sql VOLATILE
             RETURN '{taken}';"
    ));
    let e = h
        .sql()
        .query_one("SELECT occ.namespace_create('admin', 'team-c')", &[])
        .expect_err("every draw is taken");
    let e = e.as_db_error().expect("a database error");
    assert_eq!(e.code(), &postgres::error::SqlState::UNIQUE_VIOLATION);
    assert_eq!(e.message(), "no free Namespace id in 8 draws");
    let rows = h.namespace_and_work_rows();
    assert_eq!(
        rows, 4,
        "two Namespaces and their two works, nothing of team-c"
    );
}

#[test]
fn n1_create_without_create_permission_is_refused() {
    let h = Harness::new();
    h.admit("SELECT occ.identity_create('admin', 'bob')", &[]);
    let msg = h.refused("SELECT occ.namespace_create('bob', 'team-b')", &[]);
    assert!(msg.contains("bob may not create Namespaces"), "{msg}");
    let msg = h.refused("SELECT occ.namespace_create('ghost', 'team-b')", &[]);
    assert!(msg.contains("NO_IDENTITY"), "{msg}");
}

#[test]
fn n1_existing_namespace_without_installation_administer_is_refused() {
    let h = Harness::new();
    h.admit("SELECT occ.identity_create('admin', 'bob')", &[]);
    h.batch(
        "INSERT INTO occ.iam_roles (id, actions, resource_kinds) VALUES ('ns-creator', '{create}', '{namespace}');
         INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind) VALUES ('bob', 'ns-creator', 'installation');",
    );
    let msg = h.refused(
        "SELECT occ.namespace_create('bob', 'team-b', 'kube-b')",
        &[],
    );
    assert!(msg.contains("adopt an existing namespace"), "{msg}");
    let plain = h.admit("SELECT occ.namespace_create('bob', 'team-b')", &[]);
    assert_eq!(plain["status"], "provisioning");
    let adopted = h.admit(
        "SELECT occ.namespace_create('admin', 'team-c', 'kube-c')",
        &[],
    );
    assert_eq!(adopted["existingNamespace"], "kube-c");
}

#[test]
fn n4_delete_of_a_namespace_with_agents_is_refused() {
    let h = Harness::new();
    let ns = h.ready("team-a");
    h.batch(&format!(
        "BEGIN;
         INSERT INTO occ.agents (id, namespace_id, name, service_principal_id, created_by)
             VALUES ('agent-1', '{ns}', 'agent-1', 'sp-1', 'admin');
         INSERT INTO occ.identities (id, kind, namespace_id, agent_id)
             VALUES ('sp-1', 'service_principal', '{ns}', 'agent-1');
         COMMIT;"
    ));
    let msg = h.refused("SELECT occ.namespace_delete('admin', 'team-a')", &[]);
    assert!(msg.contains("not empty"), "{msg}");
    assert_eq!(h.status(&ns), "ready");
}

#[test]
fn n4_delete_stores_deleting_and_enqueues_a_distinct_teardown_key() {
    let h = Harness::new();
    let ns = h.ready("team-a");
    let v = h.admit("SELECT occ.namespace_delete('admin', 'team-a')", &[]);
    assert_eq!(v["status"], "deleting");
    assert_eq!(h.work(&delete_key(&ns)), ("queued".into(), None, 0));
    assert_eq!(
        h.work(&ensure_key(&ns)).0,
        "succeeded",
        "ensure is a separate row"
    );
    let msg = h.refused("SELECT occ.namespace_delete('admin', $1)", &[&ns]);
    assert!(msg.contains("already being deleted"), "{msg}");
}

#[test]
fn n4_delete_without_delete_permission_is_refused() {
    let h = Harness::new();
    h.ready("team-a");
    h.admit("SELECT occ.identity_create('admin', 'bob')", &[]);
    h.admit(
        "SELECT occ.binding_grant('admin', 'bob', 'viewer', 'namespace:team-a')",
        &[],
    );
    let msg = h.refused("SELECT occ.namespace_delete('bob', 'team-a')", &[]);
    assert!(msg.contains("bob may not delete Namespace team-a"), "{msg}");
}

#[test]
fn q9_deletion_retry_only_after_a_permanent_failure_with_a_new_key() {
    let h = Harness::new();
    let ns = h.ready("team-a");
    h.admit("SELECT occ.namespace_delete('admin', 'team-a')", &[]);
    let key = delete_key(&ns);
    let msg = h.refused("SELECT occ.namespace_delete_retry('admin', $1)", &[&key]);
    assert!(msg.contains("not failed_permanent"), "{msg}");

    h.driver.delete_namespace.then_err(
        1,
        ComputeError::permanent("NAMESPACE_DELETE_REFUSED", "test", None),
    );
    assert_eq!(h.pass().unwrap().code, "NAMESPACE_DELETE_REFUSED");
    assert_eq!(h.work(&key).0, "failed_permanent");
    assert_eq!(
        h.status(&ns),
        "deleting",
        "a failed deletion stays deleting"
    );

    h.admit("SELECT occ.identity_create('admin', 'bob')", &[]);
    let msg = h.refused("SELECT occ.namespace_delete_retry('bob', $1)", &[&key]);
    assert!(msg.contains("bob may not retry the deletion"), "{msg}");

    let v = h.admit("SELECT occ.namespace_delete_retry('admin', $1)", &[&key]);
    let retry = format!("{key}:2");
    assert_eq!(v["key"], retry.as_str());
    let msg = h.refused("SELECT occ.namespace_delete_retry('admin', $1)", &[&key]);
    assert!(msg.contains("not the latest deletion"), "{msg}");

    assert_eq!(h.pass().unwrap().code, "NAMESPACE_RECONCILED");
    assert_eq!(h.work(&retry).0, "succeeded");
    // Tombstoned: its deletion is done, which the refusal says (it used to say the Namespace
    // "is not being deleted").
    let msg = h.refused("SELECT occ.namespace_delete_retry('admin', $1)", &[&retry]);
    assert!(
        msg.contains(" was deleted at ")
            && msg.ends_with(": its deletion succeeded, there is nothing to retry"),
        "{msg}"
    );
}

// Ensure (N2, N3) ---------------------------------------------------------------------------

#[test]
fn n3_ready_observation_marks_ready_audits_and_completes_reconciled() {
    let h = Harness::new();
    let ns = h.create("admin", "team-a");
    let r = h.pass().unwrap();
    assert_eq!(r.code, "NAMESPACE_RECONCILED");
    assert_eq!(
        h.work(&ensure_key(&ns)),
        ("succeeded".into(), Some("NAMESPACE_RECONCILED".into()), 1)
    );
    assert_eq!(h.status(&ns), "ready");
    assert_eq!(h.driver.log(), vec![format!("ensure_namespace:{ns}")]);
    let audits = h.audits(&ns);
    assert_eq!(
        h.audit_summary(&ns),
        vec![row("mutation", ENSURE, "success", "NAMESPACE_RECONCILED")]
    );
    assert_eq!(
        audits[0].4,
        json!({"computeDriverId": "scripted-1", "complete": true, "failure": null, "convergencePending": false})
    );
    let work_id: Option<i64> = h
        .sql()
        .query_one(
            "SELECT work_id FROM occ.audit_events WHERE action = $1",
            &[&ENSURE],
        )
        .unwrap()
        .get(0);
    assert!(
        work_id.is_some(),
        "every reconciler audit row names its work"
    );
}

#[test]
fn n2_work_for_a_namespace_no_longer_provisioning_is_superseded_without_compute() {
    let h = Harness::new();
    let ns = h.create("admin", "team-a");
    h.batch(&format!(
        "UPDATE occ.namespaces_all SET status = 'failed' WHERE id = '{ns}'"
    ));
    let r = h.pass().unwrap();
    assert_eq!(r.code, "SUPERSEDED_TARGET");
    assert_eq!(
        h.work(&ensure_key(&ns)),
        ("succeeded".into(), Some("SUPERSEDED_TARGET".into()), 1)
    );
    assert_eq!(h.status(&ns), "failed");
    assert!(h.driver.log().is_empty(), "no Compute call");
    assert!(h.audits(&ns).is_empty());
}

#[test]
fn n5_revoked_actor_fails_permanently_with_a_denial_and_no_compute() {
    let h = Harness::new();
    h.admit("SELECT occ.identity_create('admin', 'bob')", &[]);
    h.admit(
        "SELECT occ.binding_grant('admin', 'bob', 'installation-admin', 'installation')",
        &[],
    );
    let ns = h.create("bob", "team-a");
    h.admit("SELECT occ.identity_revoke('admin', 'bob')", &[]);
    assert_eq!(h.pass().unwrap().code, "ACTOR_REVOKED");
    assert_eq!(
        h.work(&ensure_key(&ns)),
        ("failed_permanent".into(), Some("ACTOR_REVOKED".into()), 1)
    );
    assert_eq!(h.status(&ns), "failed");
    assert!(h.driver.log().is_empty());
    let audits = h.audits(&ns);
    assert_eq!(
        h.audit_summary(&ns),
        vec![row(
            "authorization_denial",
            "openclaw.namespaces.create",
            "denied",
            "ACTOR_REVOKED"
        )]
    );
    assert_eq!(audits[0].4["decision"]["reason"], "NO_IDENTITY");
    assert_eq!(audits[0].4["request"]["principalId"], "bob");
}

#[test]
fn n2_create_permission_lost_before_the_pass_is_denied_without_compute() {
    let h = Harness::new();
    h.admit("SELECT occ.identity_create('admin', 'bob')", &[]);
    h.admit(
        "SELECT occ.binding_grant('admin', 'bob', 'installation-admin', 'installation')",
        &[],
    );
    let ns = h.create("bob", "team-a");
    h.admit(
        "SELECT occ.binding_revoke('admin', 'bob', 'installation-admin', 'installation')",
        &[],
    );
    assert_eq!(h.pass().unwrap().code, "AUTHORIZATION_DENIED");
    assert_eq!(h.work(&ensure_key(&ns)).0, "failed_permanent");
    assert_eq!(h.status(&ns), "failed");
    assert!(h.driver.log().is_empty());
    let audits = h.audits(&ns);
    assert_eq!(
        h.audit_summary(&ns),
        vec![row(
            "authorization_denial",
            "openclaw.namespaces.create",
            "denied",
            "AUTHORIZATION_DENIED"
        )]
    );
    assert_eq!(audits[0].4["decision"]["reason"], "NO_MATCHING_BINDING");
    assert_eq!(audits[0].4["request"]["action"], "create");
}

#[test]
fn n2_existing_namespace_needs_installation_administer_at_every_pass() {
    let h = Harness::new();
    h.admit("SELECT occ.identity_create('admin', 'bob')", &[]);
    h.admit(
        "SELECT occ.binding_grant('admin', 'bob', 'installation-admin', 'installation')",
        &[],
    );
    let v = h.admit(
        "SELECT occ.namespace_create('bob', 'team-a', 'kube-a')",
        &[],
    );
    let ns = v["id"].as_str().unwrap().to_string();
    // Bob keeps `create` but loses `administer` on the installation.
    h.batch(
        "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind) VALUES ('bob', '{administer}', 'installation')",
    );
    assert_eq!(h.pass().unwrap().code, "AUTHORIZATION_DENIED");
    assert_eq!(h.status(&ns), "failed");
    assert!(h.driver.log().is_empty());
    let audits = h.audits(&ns);
    assert_eq!(audits[0].4["request"]["action"], "administer");
    assert_eq!(audits[0].4["decision"]["reason"], "RESTRICTED");
}

#[test]
fn n2_restriction_on_the_exact_namespace_denies_creation() {
    let h = Harness::new();
    let ns = h.create("admin", "team-a");
    h.batch(&format!(
        "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id)
         VALUES ('admin', '{{create}}', 'namespace', '{ns}')"
    ));
    assert_eq!(h.pass().unwrap().code, "AUTHORIZATION_DENIED");
    assert_eq!(h.status(&ns), "failed");
    assert!(h.driver.log().is_empty());
    let audits = h.audits(&ns);
    assert_eq!(audits[0].4["request"]["resource"]["id"], ns.as_str());
    assert_eq!(audits[0].4["decision"]["reason"], "RESTRICTED");
}

#[test]
fn n3_mismatched_observation_is_invalid_and_fails_the_namespace() {
    let h = Harness::new();
    let ns = h.create("admin", "team-a");
    h.driver.ensure_namespace.then(|s| {
        let mut o = ns_observation(s, true, None, None);
        o.namespace_id = "ns-other".into();
        Ok(o)
    });
    assert_eq!(h.pass().unwrap().code, "INVALID_DRIVER_OBSERVATION");
    assert_eq!(h.work(&ensure_key(&ns)).0, "failed_permanent");
    assert_eq!(h.status(&ns), "failed");
    assert_eq!(h.driver.log(), vec![format!("ensure_namespace:{ns}")]);
    assert_eq!(
        h.audit_summary(&ns),
        vec![row(
            "mutation",
            ENSURE,
            "failure",
            "INVALID_DRIVER_OBSERVATION"
        )]
    );
}

#[test]
fn n3_retryable_failure_retries_then_fails_the_namespace_at_the_attempt_limit() {
    let h = Harness::with(2, Duration::from_secs(900));
    let ns = h.create("admin", "team-a");
    h.driver.ensure_namespace.default_to(|s| {
        Ok(ns_observation(
            s,
            false,
            Some(FailureClass::Retryable),
            None,
        ))
    });
    let r = h.pass().unwrap();
    assert_eq!(r.outcome, reconcile::Outcome::Retry);
    assert_eq!(h.work(&ensure_key(&ns)), ("queued".into(), None, 1));
    assert_eq!(
        h.status(&ns),
        "provisioning",
        "a retry leaves it provisioning"
    );
    let r = h.pass().unwrap();
    assert_eq!(r.outcome, reconcile::Outcome::Permanent);
    assert_eq!(
        h.work(&ensure_key(&ns)),
        (
            "failed_permanent".into(),
            Some("NAMESPACE_INCOMPLETE".into()),
            2
        )
    );
    assert_eq!(h.status(&ns), "failed");
    assert_eq!(h.driver.log().len(), 2);
    assert_eq!(
        h.audit_summary(&ns),
        vec![
            row("mutation", ENSURE, "failure", "NAMESPACE_INCOMPLETE"),
            row("mutation", ENSURE, "failure", "NAMESPACE_INCOMPLETE"),
        ]
    );
}

#[test]
fn n3_retryable_compute_error_retries_as_dependency_unavailable() {
    let h = Harness::new();
    let ns = h.create("admin", "team-a");
    h.driver
        .ensure_namespace
        .then_err(1, ComputeError::retryable("test", Some(500)));
    assert_eq!(h.pass().unwrap().code, "DEPENDENCY_UNAVAILABLE");
    assert_eq!(
        h.work(&ensure_key(&ns)),
        ("queued".into(), None, 1),
        "the attempt is spent"
    );
    assert!(
        h.audits(&ns).is_empty(),
        "no observation, no lifecycle audit"
    );
    assert_eq!(h.pass().unwrap().code, "NAMESPACE_RECONCILED");
    assert_eq!(h.work(&ensure_key(&ns)).2, 2);
    assert_eq!(h.status(&ns), "ready");
}

#[test]
fn n3_dependency_failures_at_the_attempt_limit_fail_the_namespace() {
    let h = Harness::with(1, Duration::from_secs(900));
    let ns = h.create("admin", "team-a");
    h.driver
        .ensure_namespace
        .then_err(1, ComputeError::retryable("test", Some(500)));
    let r = h.pass().unwrap();
    assert_eq!(
        (r.outcome, r.code.as_str()),
        (reconcile::Outcome::Permanent, "DEPENDENCY_UNAVAILABLE")
    );
    assert_eq!(
        h.work(&ensure_key(&ns)),
        (
            "failed_permanent".into(),
            Some("DEPENDENCY_UNAVAILABLE".into()),
            1
        )
    );
    assert_eq!(h.status(&ns), "failed");
    assert_eq!(
        h.audit_summary(&ns),
        vec![row("mutation", ENSURE, "failure", "DEPENDENCY_UNAVAILABLE")]
    );
}

#[test]
fn n3_permanent_failure_fails_the_work_and_the_namespace() {
    let h = Harness::new();
    let ns = h.create("admin", "team-a");
    h.driver.ensure_namespace.then(|s| {
        Ok(ns_observation(
            s,
            false,
            Some(FailureClass::Permanent),
            None,
        ))
    });
    assert_eq!(h.pass().unwrap().outcome, reconcile::Outcome::Permanent);
    assert_eq!(h.work(&ensure_key(&ns)).0, "failed_permanent");
    assert_eq!(h.status(&ns), "failed");
    let audits = h.audits(&ns);
    assert_eq!(audits[0].4["failure"], "permanent");
    assert_eq!(audits[0].2, "failure");

    let ns = h.create("admin", "team-b");
    h.driver.ensure_namespace.then_err(
        1,
        ComputeError::permanent("NAMESPACE_QUOTA_EXCEEDED", "test", Some(403)),
    );
    assert_eq!(h.pass().unwrap().code, "NAMESPACE_QUOTA_EXCEEDED");
    assert_eq!(h.status(&ns), "failed");
    assert_eq!(
        h.audit_summary(&ns),
        vec![row(
            "mutation",
            ENSURE,
            "failure",
            "NAMESPACE_QUOTA_EXCEEDED"
        )]
    );
}

#[test]
fn n3_transient_dependency_retries_spending_the_attempt() {
    // Changed from a refunded deferral: Namespace work keeps its attempt budget on a transient
    // dependency failure (seed 004 403-411, 2488-2493).
    let h = Harness::new();
    let ns = h.create("admin", "team-a");
    h.driver
        .ensure_namespace
        .then_err(2, ComputeError::transient("test", Some(503)));
    for attempt in 1..=2 {
        let r = h.pass().unwrap();
        assert_eq!(r.code, "DEPENDENCY_UNAVAILABLE");
        assert_eq!(r.outcome, reconcile::Outcome::Retry);
        assert_eq!(
            h.work(&ensure_key(&ns)),
            ("queued".into(), None, attempt),
            "attempt spent"
        );
    }
    assert_eq!(h.status(&ns), "provisioning");
    assert_eq!(h.pass().unwrap().code, "NAMESPACE_RECONCILED");
    assert_eq!(h.work(&ensure_key(&ns)).2, 3);
    assert_eq!(h.driver.log().len(), 3);

    // At the attempt limit the creation fails and so does its Namespace.
    let ns = h.create("admin", "team-b");
    h.driver
        .ensure_namespace
        .then_err(3, ComputeError::transient("test", Some(503)));
    for _ in 0..3 {
        assert_eq!(h.pass().unwrap().code, "DEPENDENCY_UNAVAILABLE");
    }
    assert_eq!(
        h.work(&ensure_key(&ns)),
        (
            "failed_permanent".into(),
            Some("DEPENDENCY_UNAVAILABLE".into()),
            3
        )
    );
    assert_eq!(h.status(&ns), "failed");
}

#[test]
fn n3_pending_observations_are_audited_once_per_distinct_observation() {
    let h = Harness::new();
    let ns = h.create("admin", "team-a");
    for _ in 0..3 {
        h.driver.ensure_namespace.then(|s| {
            Ok(ns_observation(
                s,
                false,
                None,
                Some("TENANT_ROLE_BINDING_PENDING"),
            ))
        });
    }
    h.driver.ensure_namespace.then(|s| {
        Ok(ns_observation(
            s,
            false,
            None,
            Some("NETWORK_POLICY_PENDING"),
        ))
    });
    for _ in 0..4 {
        let r = h.pass().unwrap();
        assert_eq!(r.code, "NAMESPACE_INCOMPLETE");
        assert!(matches!(r.outcome, reconcile::Outcome::Pending { .. }));
    }
    let audits = h.audits(&ns);
    assert_eq!(
        h.audit_summary(&ns),
        vec![
            row("mutation", ENSURE, "success", "NAMESPACE_INCOMPLETE"),
            row("mutation", ENSURE, "success", "NAMESPACE_INCOMPLETE"),
        ]
    );
    assert_eq!(audits[0].4["pendingReason"], "TENANT_ROLE_BINDING_PENDING");
    assert_eq!(audits[0].4["convergencePending"], true);
    assert_eq!(audits[1].4["pendingReason"], "NETWORK_POLICY_PENDING");
    let evidence: i64 = h
        .sql()
        .query_one(
            "SELECT count(*) FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
             WHERE w.idempotency_key = $1 AND a.outcome = 'deferred'",
            &[&ensure_key(&ns)],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        evidence, 2,
        "repeated identical observations record no evidence"
    );
    assert_eq!(h.work(&ensure_key(&ns)), ("queued".into(), None, 0));
    assert_eq!(h.status(&ns), "provisioning");
    assert_eq!(h.pass().unwrap().code, "NAMESPACE_RECONCILED");
    assert_eq!(h.audits(&ns).len(), 3);
}

#[test]
fn q12_pending_past_the_convergence_deadline_fails_the_namespace() {
    let h = Harness::with(3, Duration::ZERO);
    let ns = h.create("admin", "team-a");
    h.driver.ensure_namespace.then(|s| {
        Ok(ns_observation(
            s,
            false,
            None,
            Some("TENANT_ROLE_BINDING_PENDING"),
        ))
    });
    let r = h.pass().unwrap();
    assert_eq!(r.code, "CONVERGENCE_DEADLINE_EXCEEDED");
    assert_eq!(
        h.work(&ensure_key(&ns)),
        (
            "failed_permanent".into(),
            Some("CONVERGENCE_DEADLINE_EXCEEDED".into()),
            1
        )
    );
    let data: Value = h
        .sql()
        .query_one(
            "SELECT result_data FROM occ.work WHERE idempotency_key = $1",
            &[&ensure_key(&ns)],
        )
        .unwrap()
        .get(0);
    assert_eq!(data, json!({"timeoutMs": 0}));
    assert_eq!(h.status(&ns), "failed");
    assert_eq!(
        h.audit_summary(&ns),
        vec![row(
            "mutation",
            ENSURE,
            "failure",
            "CONVERGENCE_DEADLINE_EXCEEDED"
        )]
    );

    // Changed: a transient failure spends an attempt and the deadline does not apply to it
    // (seed 004 403-411, 6830-6834 applies the deadline to pending outcomes only).
    let ns = h.create("admin", "team-b");
    h.driver
        .ensure_namespace
        .then_err(1, ComputeError::transient("test", None));
    let r = h.pass().unwrap();
    assert_eq!(
        (r.code.as_str(), r.outcome),
        ("DEPENDENCY_UNAVAILABLE", reconcile::Outcome::Retry)
    );
    assert_eq!(h.status(&ns), "provisioning");
}

#[test]
fn w3_a_cancelled_compute_call_publishes_nothing() {
    let h = Harness::new();
    let ns = h.create("admin", "team-a");
    h.driver.ensure_namespace.then(|_| {
        Err(ComputeError::cancelled(occ_worker::cancel::Cancelled(
            occ_worker::cancel::LossCause::RenewalRefused,
        )))
    });
    let e = h.try_pass().unwrap().unwrap_err();
    assert!(e.is_claim_loss());
    assert_eq!(
        h.work(&ensure_key(&ns)).0,
        "claimed",
        "the claim simply expires"
    );
    assert_eq!(h.status(&ns), "provisioning");
    assert!(h.audits(&ns).is_empty());
}

// Delete (N4) -------------------------------------------------------------------------------

/// A ready Namespace with bindings and restrictions scoped to it (and one that is not).
fn namespace_with_policy(h: &Harness) -> String {
    let ns = h.ready("team-a");
    h.admit("SELECT occ.identity_create('admin', 'bob')", &[]);
    h.admit(
        "SELECT occ.binding_grant('admin', 'bob', 'namespace-admin', 'namespace:team-a')",
        &[],
    );
    h.admit(
        "SELECT occ.binding_grant('admin', 'bob', 'viewer', 'installation')",
        &[],
    );
    h.batch(&format!(
        "INSERT INTO occ.secrets (namespace_id, id, backend_ref, created_by) VALUES ('{ns}', 's1', 'kns/name/key', 'admin');
         INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
             VALUES ('bob', 'agent-operator', 'resource', '{ns}', 'secret', 's1');
         INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id)
             VALUES ('bob', '{{deploy}}', 'namespace', '{ns}');
         INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
             VALUES (NULL, '{{read}}', 'resource', '{ns}', 'namespace', '{ns}');
         INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind) VALUES ('bob', '{{create}}', 'installation');"
    ));
    ns
}

fn policy_counts(h: &Harness, ns: &str) -> (i64, i64, i64) {
    let r = h
        .sql()
        .query_one(
            "SELECT (SELECT count(*) FROM occ.iam_bindings WHERE namespace_id = $1),
                    (SELECT count(*) FROM occ.iam_restrictions WHERE namespace_id = $1),
                    (SELECT count(*) FROM occ.iam_bindings WHERE namespace_id IS NULL)
                  + (SELECT count(*) FROM occ.iam_restrictions WHERE namespace_id IS NULL)",
            &[&ns],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

#[test]
fn n4_delete_tombstones_removes_scoped_policy_and_audits_in_one_fenced_transaction() {
    let h = Harness::new();
    let ns = namespace_with_policy(&h);
    assert_eq!(policy_counts(&h, &ns), (2, 2, 3));
    h.admit("SELECT occ.namespace_delete('admin', 'team-a')", &[]);
    h.driver.delete_namespace.then(|s| {
        Ok(ns_observation(
            s,
            false,
            None,
            Some("NETWORK_REMOVAL_PENDING"),
        ))
    });
    let r = h.pass().unwrap();
    assert_eq!(r.code, "NAMESPACE_INCOMPLETE");
    assert_eq!(h.status(&ns), "deleting");
    assert_eq!(
        policy_counts(&h, &ns),
        (2, 2, 3),
        "nothing removed while pending"
    );

    assert_eq!(h.pass().unwrap().code, "NAMESPACE_RECONCILED");
    assert_eq!(
        h.work(&delete_key(&ns)),
        ("succeeded".into(), Some("NAMESPACE_RECONCILED".into()), 1)
    );
    assert_eq!(h.driver.log(), vec![format!("delete_namespace:{ns}"); 2]);
    let tombstoned: bool = h
        .sql()
        .query_one(
            "SELECT deleted_at IS NOT NULL FROM occ.namespaces_all WHERE id = $1",
            &[&ns],
        )
        .unwrap()
        .get(0);
    assert!(tombstoned);
    let visible: i64 = h
        .sql()
        .query_one("SELECT count(*) FROM occ.namespaces WHERE id = $1", &[&ns])
        .unwrap()
        .get(0);
    assert_eq!(visible, 0, "tombstones are invisible to public reads");
    assert_eq!(
        policy_counts(&h, &ns),
        (0, 0, 3),
        "installation policy stays"
    );
    let audits = h.delete_audits(&ns);
    assert_eq!(
        h.delete_audit_summary(&ns),
        vec![
            row("mutation", DELETE, "success", "NAMESPACE_INCOMPLETE"),
            row("mutation", DELETE, "success", "NAMESPACE_RECONCILED"),
        ]
    );
    let removed = &audits[1].4["removedPolicy"];
    assert_eq!(removed["bindings"].as_array().unwrap().len(), 2);
    assert_eq!(removed["restrictions"].as_array().unwrap().len(), 2);
    // The name is free again for a new Namespace.
    let again = h.create("admin", "team-a");
    assert_ne!(again, ns);
}

#[test]
fn q6_a_stale_claim_publishes_no_tombstone_policy_removal_or_audit() {
    let h = Harness::new();
    let ns = namespace_with_policy(&h);
    h.admit("SELECT occ.namespace_delete('admin', 'team-a')", &[]);
    let claim = {
        let mut c = h.ctx.pool.get().unwrap();
        queue::work_claim(&mut *c, &h.ctx.queue).unwrap().unwrap()
    };
    let lease = LeaseState::new(&claim, Instant::now(), h.ctx.queue.lease);
    let pass = Pass {
        claim: &claim,
        ctx: &h.ctx,
        lease: &lease,
    };
    let reconciler = NamespaceReconciler;
    let report = occ_worker::reconcile::Reconciler::reconcile(&reconciler, &pass).unwrap();
    assert_eq!(report.code, "NAMESPACE_RECONCILED");
    // Another worker took the work over meanwhile.
    h.batch("UPDATE occ.work_lanes SET claim_token = gen_random_uuid() WHERE claim_id IS NOT NULL");
    let e = reconcile::finalize(&pass, &reconciler, report).unwrap_err();
    assert!(e.is_claim_loss());
    assert_eq!(h.status(&ns), "deleting");
    let visible: i64 = h
        .sql()
        .query_one("SELECT count(*) FROM occ.namespaces WHERE id = $1", &[&ns])
        .unwrap()
        .get(0);
    assert_eq!(visible, 1);
    assert_eq!(policy_counts(&h, &ns), (2, 2, 3));
    assert!(h.delete_audits(&ns).is_empty());
}

#[test]
fn n4_delete_permission_lost_is_denied_without_compute() {
    let h = Harness::new();
    let ns = h.ready("team-a");
    h.admit("SELECT occ.namespace_delete('admin', 'team-a')", &[]);
    h.batch(&format!(
        "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id)
         VALUES ('admin', '{{delete}}', 'namespace', '{ns}')"
    ));
    assert_eq!(h.pass().unwrap().code, "AUTHORIZATION_DENIED");
    assert_eq!(h.work(&delete_key(&ns)).0, "failed_permanent");
    assert_eq!(h.status(&ns), "deleting");
    assert!(h.driver.log().is_empty());
    assert_eq!(
        h.delete_audit_summary(&ns),
        vec![row(
            "authorization_denial",
            "openclaw.namespaces.delete",
            "denied",
            "AUTHORIZATION_DENIED"
        )]
    );
}

#[test]
fn n4_delete_work_for_a_namespace_no_longer_deleting_is_superseded() {
    let h = Harness::new();
    let ns = h.ready("team-a");
    h.admit("SELECT occ.namespace_delete('admin', 'team-a')", &[]);
    h.batch(&format!(
        "UPDATE occ.namespaces_all SET deleted_at = now() WHERE id = '{ns}'"
    ));
    assert_eq!(h.pass().unwrap().code, "SUPERSEDED_TARGET");
    assert!(h.driver.log().is_empty());
    assert!(h.delete_audits(&ns).is_empty());
}

// The real runtime ----------------------------------------------------------------------------

#[test]
fn w1_a_running_worker_drives_create_and_delete_to_completion() {
    let h = Harness::new();
    let worker = Worker::new(
        h.ctx.clone(),
        registry(),
        RuntimeOptions {
            concurrency: 2,
            poll_interval: Duration::from_millis(50),
            shutdown_grace: Duration::from_secs(2),
            listen_url: Some(h.db.url.clone()),
            db_timeout: Duration::from_secs(5),
        },
    );
    let stop = worker.stop_handle();
    let thread = std::thread::spawn(move || worker.run());
    let wait_for = |key: &str| {
        crate::support::wait_value(&format!("{key} to finish"), Duration::from_secs(20), || {
            let row = h
                .sql()
                .query_opt(
                    "SELECT state FROM occ.work_status WHERE idempotency_key = $1",
                    &[&key],
                )
                .unwrap();
            row.map(|r| r.get::<_, String>(0))
                .filter(|state| state == "succeeded" || state == "failed_permanent")
        })
    };
    let ns = h.create("admin", "team-a");
    assert_eq!(wait_for(&ensure_key(&ns)), "succeeded");
    assert_eq!(h.status(&ns), "ready");
    h.admit("SELECT occ.namespace_delete('admin', 'team-a')", &[]);
    assert_eq!(wait_for(&delete_key(&ns)), "succeeded");
    stop.stop();
    thread.join().unwrap().unwrap();
    assert_eq!(
        h.driver.log(),
        vec![
            format!("ensure_namespace:{ns}"),
            format!("delete_namespace:{ns}")
        ]
    );
}

// The operator commands (SPEC §9) -------------------------------------------------------------

fn cli(h: &Harness, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_occ-worker"))
        .args(args)
        .env("OCC_DATABASE_URL", &h.db.url)
        .output()
        .expect("run occ-worker");
    // Its diagnostics (stdout is the command's answer) for the canary scan.
    crate::support::log_stderr("cli", &out.stderr);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

#[test]
fn o_admin_commands_admit_through_sql_print_json_and_fail_with_one_line() {
    let h = Harness::new();
    let (ok, out, _) = cli(
        &h,
        &[
            "admin", "identity", "create", "bob", "--actor", "admin", "--json",
        ],
    );
    assert!(ok);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["kind"], "user");
    let (ok, out, _) = cli(
        &h,
        &[
            "admin",
            "namespace",
            "create",
            "team-a",
            "--actor",
            "admin",
            "--json",
        ],
    );
    assert!(ok, "{out}");
    let ns = serde_json::from_str::<Value>(&out).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (ok, out, _) = cli(
        &h,
        &[
            "admin",
            "grant",
            "bob",
            "viewer",
            "--scope",
            "namespace:team-a",
            "--actor",
            "admin",
            "--json",
        ],
    );
    assert!(ok, "{out}");
    let (ok, _, err) = cli(
        &h,
        &[
            "admin",
            "namespace",
            "delete",
            "team-a",
            "--actor",
            "bob",
            "--json",
        ],
    );
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bob may not delete Namespace team-a"), "{err}");
    let (ok, out, _) = cli(&h, &["admin", "namespace", "list", "--json"]);
    assert!(ok);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()[0]["id"],
        ns.as_str()
    );
    let (ok, out, _) = cli(
        &h,
        &[
            "admin",
            "namespace",
            "delete",
            &ns,
            "--actor",
            "admin",
            "--json",
        ],
    );
    assert!(ok, "{out}");
    assert_eq!(h.work(&delete_key(&ns)).0, "queued");
    let (ok, out, _) = cli(&h, &["admin", "namespace", "show", "team-a", "--json"]);
    assert!(ok);
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["status"],
        "deleting"
    );
    let (ok, _, err) = cli(
        &h,
        &[
            "admin",
            "work",
            "retry",
            &delete_key(&ns),
            "--actor",
            "admin",
        ],
    );
    assert!(!ok);
    assert!(err.contains("not failed_permanent"), "{err}");
    let (ok, out, _) = cli(&h, &["admin", "audit", "--namespace", "team-a", "--json"]);
    assert!(ok);
    let actions: Vec<String> = serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_string())
        .collect();
    // Newest first.
    assert_eq!(
        actions,
        [
            "openclaw.namespaces.delete",
            "openclaw.iam.bindings.grant",
            "openclaw.namespaces.create",
        ]
    );
}
