//! Agent admission and lifecycle (SPEC A1, A2, R1): stop and delete driven by a real worker
//! and the scripted driver, asserting work state, codes, audit rows, the active pointer and
//! the exact Compute calls.

use crate::scripted::{quiet, run_captured, run_until, run_with, Opts, ScriptedDriver};
use crate::support::LoggedOutput;
use crate::support::{insert_namespace, TestDb};
use occ_worker::compute::ComputeError;
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;

/// A ready Namespace `ns1` with a Configuration `cfg`, a Secret `key` and an Agent `bot`.
pub struct Fixture {
    pub db: TestDb,
    pub agent: String,
    pub principal: String,
}

pub fn fixture() -> Fixture {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "ready");
    let (agent, principal) = create_agent(&mut c, "ns1", "bot");
    c.execute(
        "SELECT occ.configuration_put('ns1', 'cfg', '{\"model\": \"m\"}', 'admin')",
        &[],
    )
    .unwrap();
    c.execute(
        "SELECT occ.secret_create('ns1', 'key', 'ns1/keys/api', 'admin')",
        &[],
    )
    .unwrap();
    Fixture {
        db,
        agent,
        principal,
    }
}

/// Creates an Agent whose service principal may operate the Namespace's Secret `key`.
pub fn create_agent(c: &mut Client, ns: &str, name: &str) -> (String, String) {
    let v: Value =
        crate::support::one(c, "SELECT occ.agent_create($1, $2, 'admin')", &[&ns, &name]);
    let principal = v["servicePrincipalId"].as_str().unwrap().to_string();
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ($1, 'agent-operator', 'resource', $2, 'secret', 'key')",
        &[&principal, &ns],
    )
    .unwrap();
    (v["id"].as_str().unwrap().to_string(), principal)
}

/// Admits a deployment as `actor` on the scripted Compute; returns the revision id.
pub fn deploy_as(c: &mut Client, agent: &str, actor: &str) -> String {
    let v: Value = crate::support::one(
        c,
        "SELECT occ.agent_deploy('ns1', $1, $2, 'cfg', 'codex', 'dedicated', 'key', 'scripted', 'scripted')",
        &[&agent, &actor],
    );
    v["revisionId"].as_str().unwrap().to_string()
}

pub fn deploy(c: &mut Client, agent: &str) -> String {
    deploy_as(c, agent, "admin")
}

/// (state, reason code, result data, attempt count) of one work row.
pub fn work(c: &mut Client, key: &str) -> (String, Option<String>, Option<Value>, i32) {
    let r = c
        .query_one(
            "SELECT state, reason_code, result_data, attempt_count FROM occ.work_status WHERE idempotency_key = $1",
            &[&key],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

/// The attempt evidence codes of one work row, oldest first, as "outcome:code".
pub fn evidence(c: &mut Client, key: &str) -> Vec<String> {
    c.query(
        "SELECT a.outcome || ':' || a.code FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
         WHERE w.idempotency_key = $1 ORDER BY a.id",
        &[&key],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// (kind, outcome, reason code, resource id) of every audit event with `action`.
pub fn audits(c: &mut Client, action: &str) -> Vec<(String, String, Option<String>, String)> {
    c.query(
        "SELECT kind, outcome, reason_code, resource_id FROM occ.audit_events WHERE action = $1 ORDER BY id",
        &[&action],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

pub fn active(c: &mut Client, agent: &str) -> Option<String> {
    c.query_one(
        "SELECT active_revision_id FROM occ.agents WHERE id = $1",
        &[&agent],
    )
    .unwrap()
    .get(0)
}

pub fn stop(c: &mut Client, agent: &str, actor: &str) -> String {
    let v: Value =
        crate::support::one(c, "SELECT occ.agent_stop('ns1', $1, $2)", &[&agent, &actor]);
    v["work"].as_str().unwrap().to_string()
}

pub fn user(c: &mut Client, id: &str, role: &str) {
    c.execute(
        "INSERT INTO occ.identities (id, kind) VALUES ($1, 'user')",
        &[&id],
    )
    .unwrap();
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id) VALUES ($1, $2, 'namespace', 'ns1')",
        &[&id, &role],
    )
    .unwrap();
}

fn deployed(f: &Fixture, driver: &Arc<ScriptedDriver>) -> String {
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(active(&mut c, &f.agent).as_deref(), Some(rev.as_str()));
    driver.calls.lock().clear();
    rev
}

#[test]
fn a1_stop_stops_the_active_revision_and_clears_the_pointer() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    assert_eq!(key, format!("agent:{}:stop:1", f.agent));
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(work(&mut c, &key).1.as_deref(), Some("AGENT_STOPPED"));
    assert_eq!(active(&mut c, &f.agent), None);
    assert_eq!(
        driver.calls(),
        vec![
            // The Agent's objects come back before its runtimes stop (seed 004 2633).
            ("bind_agent".to_string(), f.agent.clone()),
            ("stop_revision".to_string(), rev.clone())
        ]
    );
    let a = audits(&mut c, "openclaw.agents.lifecycle.stop");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].1, "success");
    assert_eq!(a[0].2.as_deref(), Some("AGENT_STOPPED"));
    // History remains.
    let n: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.agent_revisions WHERE agent_id = $1",
        &[&f.agent],
    );
    assert_eq!(n, 1);
}

#[test]
fn a1_stop_of_an_agent_without_active_revision_is_already_stopped() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(
        work(&mut c, &key).1.as_deref(),
        Some("AGENT_ALREADY_STOPPED")
    );
    assert!(driver.calls().is_empty());
}

#[test]
fn a1_stop_is_superseded_by_a_later_deployment() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    let rev = deploy(&mut c, &f.agent);
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(work(&mut c, &key).1.as_deref(), Some("STOP_SUPERSEDED"));
    assert!(driver.calls_of("stop_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn a1_a_deployment_admitted_during_the_last_stop_supersedes_it_and_keeps_the_pointer() {
    // Seed 004 3061-3070: the finalizer rereads the Agent under lock; desired `running` again
    // means `STOP_SUPERSEDED`, and the active pointer is not cleared.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    let url = f.db.url.clone();
    let agent = f.agent.clone();
    driver.on_call(move |method, _| {
        if method == "stop_revision" {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute(
                "UPDATE occ.agents SET desired_runtime_state = 'running' WHERE id = $1",
                &[&agent],
            )
            .unwrap();
        }
    });
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(work(&mut c, &key).1.as_deref(), Some("STOP_SUPERSEDED"));
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone()]);
    assert_eq!(active(&mut c, &f.agent), Some(rev));
    let a = audits(&mut c, "openclaw.agents.lifecycle.stop");
    assert_eq!(a[0].2.as_deref(), Some("STOP_SUPERSEDED"));
}

#[test]
fn a1_stop_by_a_revoked_actor_fails_without_compute_calls() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    deployed(&f, &driver);
    let mut c = f.db.client();
    user(&mut c, "bob", "namespace-admin");
    let key = stop(&mut c, &f.agent, "bob");
    c.execute("DELETE FROM occ.identities WHERE id = 'bob'", &[])
        .unwrap();
    run_until(&f.db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &key).failed_with("ACTOR_REVOKED");
    assert!(driver.calls().is_empty());
    // Changed: the denial is `openclaw.agents.stop`, no lifecycle event (seed 004 3156-3186).
    assert!(audits(&mut c, "openclaw.agents.lifecycle.stop").is_empty());
    let a = audits(&mut c, "openclaw.agents.stop");
    assert_eq!(
        (a[0].0.as_str(), a[0].3.as_str()),
        ("authorization_denial", f.agent.as_str())
    );
    assert!(active(&mut c, &f.agent).is_some());
}

#[test]
fn a1_stop_denied_by_a_restriction_is_audited_and_makes_no_call() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    deployed(&f, &driver);
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    c.execute(
        "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ('admin', ARRAY['operate'], 'resource', 'ns1', 'agent', $1)",
        &[&f.agent],
    )
    .unwrap();
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(
        work(&mut c, &key).1.as_deref(),
        Some("AUTHORIZATION_DENIED")
    );
    assert!(driver.calls().is_empty());
    // Changed: the denial's action is `openclaw.agents.stop` (seed 004 3156-3186).
    let a = audits(&mut c, "openclaw.agents.stop");
    assert_eq!(
        (a[0].0.as_str(), a[0].1.as_str()),
        ("authorization_denial", "denied")
    );
}

#[test]
fn a1_stop_refuses_an_active_revision_of_another_compute() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let mut c = f.db.client();
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'other', 'docker')",
        &[&f.agent],
    );
    let rev = v["revisionId"].as_str().unwrap().to_string();
    c.execute("DELETE FROM occ.work", &[]).unwrap();
    c.execute(
        "UPDATE occ.agents SET active_revision_id = $2 WHERE id = $1",
        &[&f.agent, &rev],
    )
    .unwrap();
    let key = stop(&mut c, &f.agent, "admin");
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(
        work(&mut c, &key).1.as_deref(),
        Some("COMPUTE_DRIVER_MISMATCH")
    );
    assert!(driver.calls().is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn a1_stop_refuses_a_pointer_to_another_agents_revision() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let mut c = f.db.client();
    let (other, _) = create_agent(&mut c, "ns1", "other");
    let foreign = deploy(&mut c, &other);
    c.execute("DELETE FROM occ.work", &[]).unwrap();
    // Only a broken database could hold this: bypass the foreign key to prove the check.
    c.batch_execute("SET session_replication_role = replica")
        .unwrap();
    c.execute(
        "UPDATE occ.agents SET active_revision_id = $2 WHERE id = $1",
        &[&f.agent, &foreign],
    )
    .unwrap();
    c.batch_execute("SET session_replication_role = origin")
        .unwrap();
    let key = stop(&mut c, &f.agent, "admin");
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(
        work(&mut c, &key).1.as_deref(),
        Some("INVALID_ACTIVE_REVISION")
    );
    assert!(driver.calls().is_empty());
}

/// Rewrites a revision's service principal, bypassing the triggers and foreign keys that keep
/// a sound database from ever holding this.
fn break_revision_owner(c: &mut Client, rev: &str, principal: &str) {
    c.batch_execute("SET session_replication_role = replica")
        .unwrap();
    c.execute(
        "UPDATE occ.agent_revisions SET service_principal_id = $2 WHERE id = $1",
        &[&rev, &principal],
    )
    .unwrap();
    c.batch_execute("SET session_replication_role = origin")
        .unwrap();
}

#[test]
fn a1_stop_refuses_a_revision_of_another_owner() {
    // Seed 004 2617-2631: `INVALID_REVISION_OWNER`, not `INVALID_AGENT_OWNER`.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    let mut c = f.db.client();
    let (_, other_principal) = create_agent(&mut c, "ns1", "other");
    break_revision_owner(&mut c, &rev, &other_principal);
    let key = stop(&mut c, &f.agent, "admin");
    run_until(&f.db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &key).failed_with("INVALID_REVISION_OWNER");
    assert!(driver.calls().is_empty());
}

#[test]
fn a2_delete_of_an_agent_no_longer_deleting_is_an_invalid_state() {
    // Seed 004 2769-2777: `INVALID_AGENT_STATE`, not `INVALID_AGENT_OWNER`.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    deployed(&f, &driver);
    let mut c = f.db.client();
    c.execute("SELECT occ.agent_delete('ns1', $1, 'admin')", &[&f.agent])
        .unwrap();
    c.execute(
        "UPDATE occ.agents SET status = 'active' WHERE id = $1",
        &[&f.agent],
    )
    .unwrap();
    run_until(&f.db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &format!("agent:{}:delete", f.agent))
        .failed_with("INVALID_AGENT_STATE");
    assert!(driver.calls().is_empty());
}

#[test]
fn a2_delete_refuses_a_revision_of_another_owner() {
    // Seed 004 2783-2797.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    let mut c = f.db.client();
    let (_, other_principal) = create_agent(&mut c, "ns1", "other");
    break_revision_owner(&mut c, &rev, &other_principal);
    c.execute("SELECT occ.agent_delete('ns1', $1, 'admin')", &[&f.agent])
        .unwrap();
    run_until(&f.db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &format!("agent:{}:delete", f.agent))
        .failed_with("INVALID_REVISION_OWNER");
    assert!(driver.calls().is_empty());
}

fn count(c: &mut Client, sql: &str, agent: &str) -> i64 {
    c.query_one(sql, &[&agent]).unwrap().get(0)
}

#[test]
fn a2_delete_retires_everything_and_removes_every_row_naming_the_agent() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let r1 = deployed(&f, &driver);
    let mut c = f.db.client();
    let r2 = deploy(&mut c, &f.agent);
    run_until(&f.db, driver.clone(), quiet);
    driver.calls.lock().clear();
    c.execute(
        "INSERT INTO occ.api_keys (id, service_principal_id, key_hash) VALUES ('k1', $1, repeat('a', 64))",
        &[&f.principal],
    )
    .unwrap();
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id) VALUES ($1, 'viewer', 'namespace', 'ns1')",
        &[&f.principal],
    )
    .unwrap();
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ('admin', 'agent-operator', 'resource', 'ns1', 'agent', $1)",
        &[&f.agent],
    )
    .unwrap();
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_delete('ns1', $1, 'admin')",
        &[&f.agent],
    );
    assert_eq!(v["work"], json!(format!("agent:{}:delete", f.agent)));
    // A deleting Agent refuses every synchronous mutation.
    assert!(c
        .query_one("SELECT occ.agent_stop('ns1', $1, 'admin')", &[&f.agent])
        .is_err());
    run_until(&f.db, driver.clone(), |c| {
        count(c, "SELECT count(*) FROM occ.agents WHERE id = $1", &f.agent) == 0
    });
    assert_eq!(
        driver.calls(),
        vec![
            // The Agent's objects come back before its revisions retire (seed 004 2876).
            ("bind_agent".to_string(), f.agent.clone()),
            ("retire_revision".to_string(), r1),
            ("retire_revision".to_string(), r2),
            (
                "delete_agent_runtime_credentials".to_string(),
                f.agent.clone()
            ),
        ]
    );
    for sql in [
        "SELECT count(*) FROM occ.agent_revisions WHERE agent_id = $1",
        "SELECT count(*) FROM occ.work WHERE agent_id = $1",
        "SELECT count(*) FROM occ.identities WHERE agent_id = $1",
        "SELECT count(*) FROM occ.iam_bindings WHERE resource_id = $1",
    ] {
        assert_eq!(count(&mut c, sql, &f.agent), 0, "{sql}");
    }
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM occ.api_keys WHERE service_principal_id = $1",
            &f.principal
        ),
        0
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM occ.iam_bindings WHERE principal_id = $1",
            &f.principal
        ),
        0
    );
    let a = audits(&mut c, "openclaw.agents.lifecycle.delete");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].2.as_deref(), Some("AGENT_DELETED"));
}

#[test]
fn a2_delete_of_an_agent_whose_service_principal_was_revoked_finishes() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    let mut c = f.db.client();
    c.execute("SELECT occ.identity_revoke('admin', $1)", &[&f.principal])
        .unwrap();
    c.query_one("SELECT occ.agent_delete('ns1', $1, 'admin')", &[&f.agent])
        .unwrap();
    run_until(&f.db, driver.clone(), |c| {
        count(c, "SELECT count(*) FROM occ.agents WHERE id = $1", &f.agent) == 0
    });
    assert_eq!(driver.calls_of("retire_revision"), vec![rev]);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM occ.identities WHERE id = $1",
            &f.principal
        ),
        0
    );
    let a = audits(&mut c, "openclaw.agents.lifecycle.delete");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].2.as_deref(), Some("AGENT_DELETED"));
}

#[test]
fn a2_failed_cleanup_leaves_every_row_and_an_explicit_retry_finishes() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    deployed(&f, &driver);
    driver.fail(
        "delete_agent_runtime_credentials",
        &f.agent,
        ComputeError::permanent("CREDENTIALS_REFUSED", "scripted", None),
    );
    let mut c = f.db.client();
    c.execute("SELECT occ.agent_delete('ns1', $1, 'admin')", &[&f.agent])
        .unwrap();
    run_until(&f.db, driver.clone(), quiet);
    let key = format!("agent:{}:delete", f.agent);
    crate::support::expect_work(&mut c, &key).failed_with("CREDENTIALS_REFUSED");
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM occ.agents WHERE id = $1",
            &f.agent
        ),
        1
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM occ.identities WHERE agent_id = $1",
            &f.agent
        ),
        1
    );
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_delete('ns1', $1, 'admin')",
        &[&f.agent],
    );
    assert_eq!(v["work"], json!(format!("agent:{}:delete:1", f.agent)));
    run_until(&f.db, driver.clone(), |c| {
        count(c, "SELECT count(*) FROM occ.agents WHERE id = $1", &f.agent) == 0
    });
    let a = audits(&mut c, "openclaw.agents.lifecycle.delete");
    assert_eq!(
        a.iter().map(|x| x.2.clone().unwrap()).collect::<Vec<_>>(),
        vec!["CREDENTIALS_REFUSED", "AGENT_DELETED"]
    );
}

#[test]
fn a2_delete_by_a_denied_actor_fails_and_keeps_the_agent() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    deployed(&f, &driver);
    let mut c = f.db.client();
    user(&mut c, "bob", "namespace-admin");
    c.execute("SELECT occ.agent_delete('ns1', $1, 'bob')", &[&f.agent])
        .unwrap();
    c.execute(
        "DELETE FROM occ.iam_bindings WHERE principal_id = 'bob'",
        &[],
    )
    .unwrap();
    run_until(&f.db, driver.clone(), quiet);
    let key = format!("agent:{}:delete", f.agent);
    assert_eq!(
        work(&mut c, &key).1.as_deref(),
        Some("AUTHORIZATION_DENIED")
    );
    assert!(driver.calls().is_empty());
    // Changed: the denial's action is `openclaw.agents.delete` (seed 004 3156-3186).
    assert!(audits(&mut c, "openclaw.agents.lifecycle.delete").is_empty());
    let a = audits(&mut c, "openclaw.agents.delete");
    assert_eq!(
        (a[0].0.as_str(), a[0].3.as_str()),
        ("authorization_denial", f.agent.as_str())
    );
}

#[test]
fn r1_admission_refuses_unauthorized_actors_and_unready_namespaces() {
    let f = fixture();
    let mut c = f.db.client();
    user(&mut c, "viewer1", "viewer");
    let e = c
        .query_one(
            "SELECT occ.agent_deploy('ns1', $1, 'viewer1', 'cfg', 'codex', 'dedicated', 'key', 'scripted', 'scripted')",
            &[&f.agent],
        )
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("may not deploy"));
    insert_namespace(&mut c, "ns2", "provisioning");
    let e = c
        .query_one("SELECT occ.agent_create('ns2', 'x', 'admin')", &[])
        .unwrap_err();
    assert!(e.as_db_error().unwrap().message().contains("must be ready"));
    // A malformed snapshot is rejected by PostgreSQL itself.
    let e = c
        .execute(
            "INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id, service_principal_id,
               configuration_id, configuration_generation, document, harness_id, harness_version, harness_mode,
               execution_mode, compute_id, compute_implementation, plugins)
             SELECT 'bad', 'ns1', id, 7, 'admin', service_principal_id, 'cfg', 1, '{}', 'codex', '1.0.0',
               'dedicated', 'dedicated', 'scripted', 'scripted', '[{\"id\": 5}]' FROM occ.agents WHERE id = $1",
            &[&f.agent],
        )
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("revision number"));
    // Configuration puts make new generations; revisions pin theirs.
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.configuration_put('ns1', 'cfg', '{\"model\": \"n\"}', 'admin')",
        &[],
    );
    assert_eq!(v["generation"], json!(2));
}

pub fn cli(db: &TestDb, args: &[&str]) -> Value {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_occ-worker"));
    cmd.args(["--json", "--database-url", &db.url]).args(args);
    crate::support::json_ok(&mut cmd, &format!("occ-worker {args:?}"))
}

#[test]
fn o_cli_admits_an_agent_deployment_and_shows_its_revision_status() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "ready");
    let dir = std::env::temp_dir().join(format!("occ-cfg-{}", db.name));
    std::fs::write(&dir, r#"{"model": "m"}"#).unwrap();
    let cfg = cli(
        &db,
        &[
            "admin",
            "configuration",
            "put",
            "ns1",
            "cfg",
            "--file",
            dir.to_str().unwrap(),
            "--actor",
            "admin",
        ],
    );
    assert_eq!(cfg["generation"], json!(1));
    std::fs::remove_file(&dir).unwrap();
    cli(
        &db,
        &[
            "admin",
            "secret",
            "create",
            "ns1",
            "key",
            "--backend-ref",
            "ns1/keys/api",
            "--actor",
            "admin",
        ],
    );
    let agent = cli(
        &db,
        &["admin", "agent", "create", "ns1", "bot", "--actor", "admin"],
    );
    let deployed = cli(
        &db,
        &crate::support::deploy_args(
            "ns1",
            "bot",
            "cfg",
            &[
                "--actor",
                "admin",
                "--harness-secret",
                "key",
                "--compute-id",
                "scripted",
                "--compute-implementation",
                "scripted",
            ],
        ),
    );
    assert_eq!(deployed["revision"], json!(1));
    let shown = cli(&db, &["admin", "agent", "show", "ns1", "bot"]);
    assert_eq!(shown["id"], agent["id"]);
    assert_eq!(shown["revisions"][0]["state"], json!("pending"));
    assert_eq!(shown["revisions"][0]["error"], Value::Null);
    let stopped = cli(
        &db,
        &["admin", "agent", "stop", "ns1", "bot", "--actor", "admin"],
    );
    assert!(stopped["work"].as_str().unwrap().ends_with(":stop:1"));
    cli(
        &db,
        &["admin", "agent", "delete", "ns1", "bot", "--actor", "admin"],
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_occ-worker"))
        .args([
            "--database-url",
            &db.url,
            "admin",
            "agent",
            "stop",
            "ns1",
            "bot",
            "--actor",
            "admin",
        ])
        .logged_output("agent.occ-worker")
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is being deleted"));
}

#[test]
fn a2_a_claim_lost_before_the_finalizer_leaves_every_row_and_the_retry_finishes() {
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    deployed(&f, &driver);
    let url = f.db.url.clone();
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = fired.clone();
    let agent = f.agent.clone();
    let seen = Arc::new(parking_lot::Mutex::new(None::<i64>));
    let seen_in_hook = seen.clone();
    driver.on_call(move |method, _| {
        if method == "delete_agent_runtime_credentials"
            && !once.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute(
                "UPDATE occ.work_lanes SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE claim_id IS NOT NULL",
                &[],
            )
            .unwrap();
            let n: i64 = crate::support::one(
                &mut c,
                "SELECT count(*) FROM occ.agents WHERE id = $1",
                &[&agent],
            );
            *seen_in_hook.lock() = Some(n);
        }
    });
    let mut c = f.db.client();
    c.execute("SELECT occ.agent_delete('ns1', $1, 'admin')", &[&f.agent])
        .unwrap();
    run_until(&f.db, driver.clone(), |c| {
        count(c, "SELECT count(*) FROM occ.agents WHERE id = $1", &f.agent) == 0
    });
    assert_eq!(*seen.lock(), Some(1));
    // The first pass lost its claim after its external cleanup: nothing was published, the
    // recovered work ran again and only then removed the Agent.
    assert_eq!(
        driver.calls_of("delete_agent_runtime_credentials"),
        vec![f.agent.clone(), f.agent.clone()]
    );
    assert_eq!(audits(&mut c, "openclaw.agents.lifecycle.delete").len(), 1);
}

#[test]
fn a1_a_transient_compute_failure_retries_the_stop_spending_an_attempt() {
    // Changed from a refunded deferral: Agent stop keeps its attempt budget on a transient
    // dependency failure (seed 004 403-411, 2696-2700).
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    driver.fail(
        "stop_revision",
        &rev,
        ComputeError::transient("scripted", Some(503)),
    );
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    run_until(&f.db, driver.clone(), quiet);
    let (_, code, _, attempts) = work(&mut c, &key);
    assert_eq!(code.as_deref(), Some("AGENT_STOPPED"));
    assert_eq!(attempts, 2);
    assert_eq!(
        evidence(&mut c, &key),
        vec!["retry:DEPENDENCY_UNAVAILABLE", "succeeded:AGENT_STOPPED"]
    );
    assert_eq!(driver.calls_of("stop_revision"), vec![rev.clone(), rev]);
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn a1_a_stop_failing_transiently_fails_at_the_attempt_limit_not_the_deadline() {
    // Seed 004 403-411, 2696-2700: no convergence deadline bounds a stop, its attempts do.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    for _ in 0..5 {
        driver.fail(
            "stop_revision",
            &rev,
            ComputeError::transient("scripted", Some(503)),
        );
    }
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    run_until(&f.db, driver.clone(), quiet);
    let (state, code, _, attempts) = work(&mut c, &key);
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        ("failed_permanent", Some("DEPENDENCY_UNAVAILABLE"), 5)
    );
    assert_eq!(active(&mut c, &f.agent).as_deref(), Some(rev.as_str()));
}

#[test]
fn w7_completed_separates_classification_from_the_queue_decision_and_pass_errors_name_the_step() {
    // Seed 004 801-822, 869-879, 3113-3125: `result` is the classification, `outcome` the
    // queue's decision (`permanent` at the attempt limit); `workId` is the work's key. Every
    // retried pass emits one `worker.pass-error` naming the step and the Compute error.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    for _ in 0..5 {
        driver.fail(
            "stop_revision",
            &rev,
            ComputeError::retryable("scripted", Some(503)).with_reason("ServiceUnavailable"),
        );
    }
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    let events = run_captured(&f.db, driver.clone(), Opts::default(), quiet);
    let completed: Vec<_> = events
        .named("worker.completed")
        .into_iter()
        .filter(|e| e["workId"] == key.as_str())
        .collect();
    assert_eq!(completed.len(), 5, "{completed:?}");
    for (i, e) in completed.iter().enumerate() {
        assert_eq!(e["result"], "retry");
        let expected = if i == 4 { "permanent" } else { "retry" };
        assert_eq!(e["outcome"], expected, "{e}");
        assert_eq!(e["code"], "DEPENDENCY_UNAVAILABLE");
    }
    let errors: Vec<_> = events
        .named("worker.pass-error")
        .into_iter()
        .filter(|e| e["workId"] == key.as_str())
        .collect();
    assert_eq!(errors.len(), 5, "{errors:?}");
    for e in &errors {
        // One operation, one name in adjacent lines (it used to be `agent_stop` here and
        // `agent.stop` in worker.completed).
        assert_eq!(e["operation"], completed[0]["operation"], "{e}");
        assert_eq!(e["operation"], "agent.stop", "{e}");
        assert_eq!(
            (&e["step"], &e["class"], &e["status"], &e["reason"]),
            (
                &json!("stop"),
                &json!("scripted"),
                &json!(503),
                &json!("ServiceUnavailable")
            ),
            "{e}"
        );
    }
}

#[test]
fn a1_a_draining_stop_yields_without_spending_attempts_before_the_deadline() {
    // SPEC Z5 (seed 004 2686-2692, 3085-3092): while the work is younger than the convergence
    // deadline a draining stop is pending `AGENT_STOP_YIELDED`, refunds its attempt and records
    // no evidence.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    for _ in 0..6 {
        driver.fail(
            "stop_revision",
            &rev,
            ComputeError::draining("kubernetes_pods_terminating"),
        );
    }
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    run_with(&f.db, driver.clone(), Opts::default(), quiet);
    let (state, code, _, attempts) = work(&mut c, &key);
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        ("succeeded", Some("AGENT_STOPPED"), 1)
    );
    assert_eq!(evidence(&mut c, &key), vec!["succeeded:AGENT_STOPPED"]);
    assert_eq!(driver.calls_of("stop_revision").len(), 7);
}

#[test]
fn a1_a_stop_that_never_drains_fails_within_the_budget_past_the_deadline() {
    // Seed 004 2701-2712 (SPEC Z5: "before the work reaches the convergence deadline"): past
    // the deadline a stop that keeps draining (a Pod stuck Terminating) no longer yields: it
    // retries as a failing dependency, spending attempts, and fails at the budget's end, so
    // the Agent's lane moves on.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    for _ in 0..10 {
        driver.fail(
            "stop_revision",
            &rev,
            ComputeError::draining("kubernetes_pods_terminating"),
        );
    }
    let mut c = f.db.client();
    let key = stop(&mut c, &f.agent, "admin");
    let opts = Opts {
        convergence: std::time::Duration::ZERO,
        ..Opts::default()
    };
    run_with(&f.db, driver.clone(), opts, quiet);
    let (state, code, _, attempts) = work(&mut c, &key);
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        ("failed_permanent", Some("DEPENDENCY_UNAVAILABLE"), 5)
    );
    let evidence = evidence(&mut c, &key);
    assert_eq!(evidence.len(), 5, "{evidence:?}");
    assert!(
        evidence[..4]
            .iter()
            .all(|e| e == "retry:DEPENDENCY_UNAVAILABLE"),
        "{evidence:?}"
    );
    assert_eq!(driver.calls_of("stop_revision").len(), 5);
}

#[test]
fn a2_a_delete_failing_transiently_fails_at_the_attempt_limit() {
    // Seed 004 403-411, 2903-2907: Agent deletion keeps its attempt budget.
    let f = fixture();
    let driver = Arc::new(ScriptedDriver::new());
    let rev = deployed(&f, &driver);
    for _ in 0..5 {
        driver.fail(
            "retire_revision",
            &rev,
            ComputeError::transient("scripted", Some(503)),
        );
    }
    let mut c = f.db.client();
    c.execute("SELECT occ.agent_delete('ns1', $1, 'admin')", &[&f.agent])
        .unwrap();
    run_until(&f.db, driver.clone(), quiet);
    let key = format!("agent:{}:delete", f.agent);
    let (state, code, _, attempts) = work(&mut c, &key);
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        ("failed_permanent", Some("DEPENDENCY_UNAVAILABLE"), 5)
    );
}

/// Waits until another session is blocked on a lock.
fn wait_until_blocked(c: &mut Client) {
    crate::support::wait_for(
        "a session blocked on a lock",
        std::time::Duration::from_secs(10),
        || {
            let n: i64 = crate::support::one(
                c,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            );
            n > 0
        },
    );
}

#[test]
fn r1_agent_create_waits_for_a_namespace_delete_admission_and_is_then_refused() {
    let f = fixture();
    let mut c = f.db.client();
    insert_namespace(&mut c, "ns2", "ready");
    let mut deleter = f.db.client();
    let mut tx = deleter.transaction().unwrap();
    tx.query_one("SELECT occ.namespace_delete('admin', 'ns2')", &[])
        .unwrap();
    let url = f.db.url.clone();
    let create = std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query_one("SELECT occ.agent_create('ns2', 'late', 'admin')", &[])
            .map(|_| ())
            .map_err(|e| e.as_db_error().unwrap().message().to_string())
    });
    wait_until_blocked(&mut c);
    tx.commit().unwrap();
    let refused = create.join().unwrap().unwrap_err();
    assert!(refused.contains("is deleting (must be ready)"), "{refused}");
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM occ.agents WHERE namespace_id = $1",
            "ns2"
        ),
        0
    );
}

#[test]
fn r1_a_namespace_delete_admission_waits_for_an_agent_create_and_is_then_refused() {
    let f = fixture();
    let mut c = f.db.client();
    insert_namespace(&mut c, "ns2", "ready");
    let mut creator = f.db.client();
    let mut tx = creator.transaction().unwrap();
    tx.query_one("SELECT occ.agent_create('ns2', 'early', 'admin')", &[])
        .unwrap();
    let url = f.db.url.clone();
    let delete = std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query_one("SELECT occ.namespace_delete('admin', 'ns2')", &[])
            .map(|_| ())
            .map_err(|e| e.as_db_error().unwrap().message().to_string())
    });
    wait_until_blocked(&mut c);
    tx.commit().unwrap();
    let refused = delete.join().unwrap().unwrap_err();
    assert!(refused.contains("is not empty"), "{refused}");
    let status: String = crate::support::one(
        &mut c,
        "SELECT status FROM occ.namespaces WHERE id = 'ns2'",
        &[],
    );
    assert_eq!(status, "ready");
}

/// A ready Namespace `ns1` with a Configuration `cfg` and a Secret `key`, admitted through the
/// CLI, and the Agent `bot` created with `create` (extra `agent create` arguments): the database
/// and the Agent's id.
fn f105_cli_fixture(create: &[&str]) -> (TestDb, String) {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "ready");
    c.execute(
        "SELECT occ.configuration_put('ns1', 'cfg', '{\"model\": \"m\"}', 'admin')",
        &[],
    )
    .unwrap();
    c.execute(
        "SELECT occ.secret_create('ns1', 'key', 'ns1/keys/api', 'admin')",
        &[],
    )
    .unwrap();
    let mut args = vec!["admin", "agent", "create", "ns1", "bot", "--actor", "admin"];
    args.extend_from_slice(create);
    let created = cli(&db, &args);
    let principal = created["servicePrincipalId"].as_str().unwrap();
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ($1, 'agent-operator', 'resource', 'ns1', 'secret', 'key')",
        &[&principal],
    )
    .unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    (db, id)
}

/// `agent deploy ns1 bot` of `cfg` with the Secret `key` on the scripted Compute, then `more`.
fn f105_deploy_args<'a>(more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "admin",
        "agent",
        "deploy",
        "ns1",
        "bot",
        "--configuration",
        "cfg",
        "--actor",
        "admin",
        "--harness-secret",
        "key",
        "--compute-id",
        "scripted",
        "--compute-implementation",
        "scripted",
    ];
    args.extend_from_slice(more);
    args
}

/// (revisions, work rows, deploy admission audits) of the Namespace `ns1`.
fn f105_written(c: &mut Client) -> (i64, i64, i64) {
    let row = c
        .query_one(
            "SELECT (SELECT count(*) FROM occ.agent_revisions WHERE namespace_id = 'ns1'),
                    (SELECT count(*) FROM occ.work
                     WHERE namespace_id = 'ns1' AND revision_id IS NOT NULL),
                    (SELECT count(*) FROM occ.audit_events
                     WHERE action = 'openclaw.agents.deploy.admit')",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

// SPEC R1: the Agent's explicit execution mode, set at creation, is what each deployment
// snapshots: a deployment need not repeat it, and `agent show` names it on the Agent and on
// each revision beside the Harness it runs.
#[test]
fn f105_an_agent_created_with_an_execution_mode_deploys_in_it_and_shows_it() {
    let (db, _) = f105_cli_fixture(&["--execution-mode", "embedded"]);
    let mut c = db.client();
    let deployed = cli(&db, &f105_deploy_args(&["--harness", "openclaw"]));
    assert_eq!(deployed["executionMode"], json!("embedded"));
    let (harness_mode, execution_mode): (String, String) = {
        let row = c
            .query_one(
                "SELECT harness_mode, execution_mode FROM occ.agent_revisions WHERE id = $1",
                &[&deployed["revisionId"].as_str().unwrap()],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(
        (harness_mode.as_str(), execution_mode.as_str()),
        ("embedded", "embedded")
    );
    // The same mode named again is accepted.
    cli(
        &db,
        &f105_deploy_args(&["--harness", "openclaw", "--mode", "embedded"]),
    );
    let shown = cli(&db, &["admin", "agent", "show", "ns1", "bot"]);
    assert_eq!(shown["executionMode"], json!("embedded"));
    for revision in shown["revisions"].as_array().unwrap() {
        assert_eq!(revision["executionMode"], json!("embedded"));
        assert_eq!(revision["harnessId"], json!("openclaw"));
        assert_eq!(revision["harnessVersion"], json!("1.0.0"));
    }
    assert_eq!(shown["revisions"].as_array().unwrap().len(), 2);
}

// SPEC R1: a deployment in another mode than the Agent's is refused in one line (exit 2: it can
// never be admitted as given) before anything is written; so is a Harness the catalog does not
// approve in the Agent's mode, and in production a pair production does not run, read from
// the Agent when --mode is omitted.
#[test]
fn f105_a_deployment_in_another_mode_than_the_agents_is_refused_and_writes_nothing() {
    let (db, agent) = f105_cli_fixture(&["--execution-mode", "dedicated"]);
    let mut c = db.client();
    crate::cli::refused(
        Some(&db.url),
        &f105_deploy_args(&["--harness", "codex", "--mode", "embedded"]),
        2,
        &format!(
            "agent deploy refused: agent ns1/{agent} runs in dedicated execution mode \
             (set at its creation), not in embedded mode"
        ),
    );
    assert_eq!(f105_written(&mut c), (0, 0, 0));
    c.execute(
        "DELETE FROM occ.approved_harnesses WHERE harness_id = 'openclaw' AND mode = 'dedicated'",
        &[],
    )
    .unwrap();
    crate::cli::refused(
        Some(&db.url),
        &f105_deploy_args(&["--harness", "openclaw"]),
        2,
        "agent deploy refused: harness openclaw is not approved in dedicated mode",
    );
    assert_eq!(f105_written(&mut c), (0, 0, 0));
    // The database holds a revision to its Agent's mode whoever writes it.
    let err = c
        .query_one(
            "SELECT occ.agent_deploy('ns1', 'bot', 'admin', 'cfg', 'codex', 'embedded', 'key',
                                     'scripted', 'scripted')",
            &[],
        )
        .unwrap_err();
    assert_eq!(
        err.as_db_error().map(|e| e.code().clone()),
        Some(postgres::error::SqlState::CHECK_VIOLATION)
    );
    assert_eq!(f105_written(&mut c), (0, 0, 0));
    // Production: the Agent's dedicated mode with openclaw is no production pair.
    let mut args = vec!["--database-url", db.url.as_str()];
    args.extend(f105_deploy_args(&["--harness", "openclaw"]));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_occ-worker"))
        .args(&args)
        .env("OCC_WORKER_MODE", "production")
        .logged_output("agent.occ-worker")
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--harness openclaw --mode dedicated is refused in production"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(f105_written(&mut c), (0, 0, 0));
}

// SPEC R1: an Agent created without an execution mode keeps today's contract: each deployment
// names its mode (and may change it), and one without is refused in one line, nothing written.
#[test]
fn f105_an_agent_without_an_execution_mode_needs_the_deployments_mode() {
    let (db, agent) = f105_cli_fixture(&[]);
    let mut c = db.client();
    crate::cli::refused(
        Some(&db.url),
        &f105_deploy_args(&["--harness", "codex"]),
        2,
        &format!(
            "agent deploy refused: agent ns1/{agent} has no execution mode: a deployment must \
             name its mode (dedicated or embedded)"
        ),
    );
    assert_eq!(f105_written(&mut c), (0, 0, 0));
    cli(
        &db,
        &f105_deploy_args(&["--harness", "codex", "--mode", "dedicated"]),
    );
    cli(
        &db,
        &f105_deploy_args(&["--harness", "openclaw", "--mode", "embedded"]),
    );
    let shown = cli(&db, &["admin", "agent", "show", "ns1", "bot"]);
    assert_eq!(shown["executionMode"], Value::Null);
    assert_eq!(shown["revisions"][0]["executionMode"], json!("dedicated"));
    assert_eq!(shown["revisions"][1]["executionMode"], json!("embedded"));
}
