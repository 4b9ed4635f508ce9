//! Managed ChatGPT account harness auth end to end (SPEC §10, M1-M4), against a real worker,
//! PostgreSQL and the scripted Compute Driver: admission freezes the exact harness auth and
//! refuses what it cannot verify; every pass re-decides the four M2 checks in order, each a
//! permanent refusal with no Compute call; a re-granted `read` lifts a stored refused-candidate
//! wait; the driver receives the `secretRef`, never a value; V9 keeps old rows meaningful.

use crate::agent::{active, audits, evidence, fixture, work, Fixture};
use crate::scripted::{quiet, run_until, Prepare, ScriptedDriver};
use crate::support::{insert_namespace, TestDb};
use occ_worker::compute::{
    BackendBinding, ComputeError, Credential, ManagedAccountAuth, SecretRef,
};
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;

fn key(rev: &str) -> String {
    format!("agent_revision:{rev}:reconcile")
}

/// The exact harness auth admission freezes for the fixture's account `acct`.
fn frozen() -> Value {
    json!({
        "method": "service_account",
        "source": {"namespaceId": "ns1", "id": "acct"},
        "credential": {"kind": "access_token", "secretRef": {"name": "chatgpt", "key": "token"}},
        "backendBinding": {"backendId": "b1", "driverId": "chatgpt-driver",
                           "workspaceId": "ws-1", "credentialIssued": true},
    })
}

/// The agent fixture plus a configured `chatgpt` backend `b1` and an issued account `acct`
/// (`chatgpt/token`) bound to it.
fn managed() -> Fixture {
    let f = fixture();
    f.db.client()
        .batch_execute(
            "SELECT occ.backend_add('admin', 'b1', 'chatgpt');
             SELECT occ.service_account_create('ns1', 'acct', 'chatgpt/token', 'admin');
             SELECT occ.service_account_bind('ns1', 'acct', 'b1', 'chatgpt-driver', 'ws-1', 'admin');",
        )
        .unwrap();
    f
}

/// Admits a managed-account deployment as `actor`.
fn deploy_managed(c: &mut Client, agent: &str, actor: &str) -> Result<String, postgres::Error> {
    let v: Value = c
        .query_one(
            "SELECT occ.agent_deploy('ns1', $1, $2, 'cfg', 'codex', 'dedicated', NULL, 'scripted',
               'scripted', p_service_account => 'acct')",
            &[&agent, &actor],
        )?
        .get(0);
    Ok(v["revisionId"].as_str().unwrap().to_string())
}

/// Runs the worker until `rev`'s reconcile work is terminal.
fn run_rev(f: &Fixture, driver: &Arc<ScriptedDriver>, rev: &str) {
    let k = key(rev);
    run_until(&f.db, driver.clone(), move |c| {
        c.query_one(
            "SELECT state FROM occ.work_status WHERE idempotency_key = $1",
            &[&k],
        )
        .unwrap()
        .get::<_, String>(0)
        .starts_with(['s', 'f'])
    });
}

/// `rev` fails with `code` before any Compute call; only a denial is audited (seed 004
/// 5916-5922, 6798-6823).
fn assert_refused(f: &Fixture, rev: &str, code: &str) {
    let driver = Arc::new(ScriptedDriver::new());
    run_rev(f, &driver, rev);
    let mut c = f.db.client();
    let (state, got, _, _) = work(&mut c, &key(rev));
    assert_eq!(
        (state.as_str(), got.as_deref()),
        ("failed_permanent", Some(code)),
        "{rev}"
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.calls());
    let denials = audits(&mut c, "openclaw.agents.deploy");
    if code == "AUTHORIZATION_DENIED" {
        assert_eq!(denials.len(), 1, "{denials:?}");
        assert_eq!(
            (denials[0].0.as_str(), denials[0].3.as_str()),
            ("authorization_denial", f.agent.as_str())
        );
    } else {
        assert!(denials.is_empty(), "{denials:?}");
    }
}

fn deny_read(c: &mut Client, principal: &str) {
    c.execute(
        "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ($1, ARRAY['read'], 'resource', 'ns1', 'service_account', 'acct')",
        &[&principal],
    )
    .unwrap();
}

fn sqlstate(e: &postgres::Error) -> (String, String) {
    let db = e.as_db_error().expect("a database error");
    (db.code().code().to_string(), db.message().to_string())
}

#[test]
fn m1_admission_freezes_the_exact_harness_auth_and_backend_whatever_happens_to_the_account() {
    let f = managed();
    let mut c = f.db.client();
    let rev = deploy_managed(&mut c, &f.agent, "admin").unwrap();
    let row = c
        .query_one(
            "SELECT harness_auth, backend_id FROM occ.agent_revisions WHERE id = $1",
            &[&rev],
        )
        .unwrap();
    assert_eq!(row.get::<_, Value>(0), frozen());
    assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("b1"));
    // Later account changes never mutate the admitted revision (R1).
    c.batch_execute(
        "SELECT occ.service_account_create('ns1', 'acct', 'other/key', 'admin');
         SELECT occ.backend_add('admin', 'b2', 'chatgpt');
         SELECT occ.service_account_bind('ns1', 'acct', 'b2', 'd2', 'ws-2', 'admin');",
    )
    .unwrap();
    let after: Value = crate::support::one(
        &mut c,
        "SELECT harness_auth FROM occ.agent_revisions WHERE id = $1",
        &[&rev],
    );
    assert_eq!(after, frozen());
    let admitted: Value = crate::support::one(
        &mut c,
        "SELECT details FROM occ.audit_events WHERE action = 'openclaw.agents.deploy.admit'",
        &[],
    );
    assert_eq!(admitted["harnessAuth"], "service_account");
}

#[test]
fn m1_admission_refuses_without_read_an_unissued_account_and_an_invalid_binding() {
    let f = managed();
    let mut c = f.db.client();
    // No `read` on the account: `agent-operator` covers Agents, Configurations and Secrets only.
    c.batch_execute(
        "INSERT INTO occ.identities (id, kind) VALUES ('op', 'user');
         INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id)
         VALUES ('op', 'agent-operator', 'namespace', 'ns1');",
    )
    .unwrap();
    let e = deploy_managed(&mut c, &f.agent, "op").unwrap_err();
    assert_eq!(sqlstate(&e).0, "42501", "{e:?}");
    // Granted `read` on exactly this account (the scope `grant list` prints), it is admitted.
    c.execute(
        "SELECT occ.binding_grant('admin', 'op', 'viewer', 'service_account:ns1/acct')",
        &[],
    )
    .unwrap();
    deploy_managed(&mut c, &f.agent, "op").unwrap();

    // The binding fails validation: its backend is no longer configured.
    c.execute("SELECT occ.backend_remove('admin', 'b1')", &[])
        .unwrap();
    let e = deploy_managed(&mut c, &f.agent, "admin").unwrap_err();
    assert_eq!(
        sqlstate(&e),
        (
            "55000".into(),
            "service account ns1/acct has no valid backend binding (bind it to a configured chatgpt backend)".into()
        )
    );
    c.execute("SELECT occ.backend_add('admin', 'b1', 'chatgpt')", &[])
        .unwrap();
    // Unbound.
    c.execute("DELETE FROM occ.service_account_bindings", &[])
        .unwrap();
    let e = deploy_managed(&mut c, &f.agent, "admin").unwrap_err();
    assert_eq!(sqlstate(&e).0, "55000");
    // Not issued: no access-token credential.
    c.execute("UPDATE occ.service_accounts SET credential = NULL", &[])
        .unwrap();
    let e = deploy_managed(&mut c, &f.agent, "admin").unwrap_err();
    assert_eq!(
        sqlstate(&e),
        (
            "55000".into(),
            "service account ns1/acct is not issued (no access token)".into()
        )
    );
    // An unissued account cannot be bound either.
    let e = c
        .execute(
            "SELECT occ.service_account_bind('ns1', 'acct', 'b1', 'd', 'w', 'admin')",
            &[],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&e).0, "55000");
    // Exactly one harness source.
    let e = c
        .execute(
            "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key', 'scripted',
               'scripted', p_service_account => 'acct')",
            &[&f.agent],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&e).0, "22023");
    // One admitted revision (the `op` one) and no other.
    let n: i64 = crate::support::one(&mut c, "SELECT count(*) FROM occ.agent_revisions", &[]);
    assert_eq!(n, 1);
}

#[test]
fn m4_constraints_refuse_malformed_credentials_bindings_and_snapshots() {
    let f = managed();
    let mut c = f.db.client();
    for bad in [
        "UPDATE occ.service_accounts SET credential = '{\"kind\": \"api_key\", \"secretRef\": {\"name\": \"a\", \"key\": \"b\"}}'",
        "UPDATE occ.service_accounts SET credential = '{\"kind\": \"access_token\", \"secretRef\": {\"name\": \"A B\", \"key\": \"b\"}}'",
        "UPDATE occ.service_accounts SET credential = '{\"kind\": \"access_token\", \"secretRef\": {\"name\": \"a\"}}'",
        "UPDATE occ.service_accounts SET credential = '{\"kind\": \"access_token\", \"secretRef\": {\"name\": \"a\", \"key\": \"b\"}, \"value\": \"x\"}'",
        "UPDATE occ.service_account_bindings SET workspace_id = ''",
        "UPDATE occ.service_account_bindings SET driver_id = 'Bad Driver'",
        "INSERT INTO occ.backends (id, type, created_by) VALUES ('b9', 'openai', 'admin')",
    ] {
        let e = c.execute(bad, &[]).unwrap_err();
        assert_eq!(sqlstate(&e).0, "23514", "{bad}");
    }
    // A managed-account snapshot must be exact, and its binding must name the revision's
    // backend.
    let insert = "INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id, service_principal_id,
           configuration_id, configuration_generation, document, harness_id, harness_version, harness_mode,
           execution_mode, compute_id, compute_implementation, harness_auth, backend_id)
         SELECT 'rx', 'ns1', id, 1, 'admin', service_principal_id, 'cfg', 1, '{}', 'codex', '1.0.0',
           'dedicated', 'dedicated', 'scripted', 'scripted', $2, $3 FROM occ.agents WHERE id = $1";
    let mut extra = frozen();
    extra["accessToken"] = json!("value");
    let mut unverified = frozen();
    unverified["backendBinding"]["credentialIssued"] = json!("yes");
    for (auth, backend) in [
        (extra, Some("b1")),
        (unverified, Some("b1")),
        (frozen(), Some("b2")),
        (frozen(), None),
    ] {
        let e = c.execute(insert, &[&f.agent, &auth, &backend]).unwrap_err();
        assert_eq!(sqlstate(&e).0, "23514", "{auth} {backend:?}");
    }
    c.execute(insert, &[&f.agent, &frozen(), &Some("b1")])
        .unwrap();
}

/// Inserts a revision with `auth` and `backend` directly (admission refuses what these tests
/// need to exist), and its reconcile work.
fn insert_revision(c: &mut Client, agent: &str, id: &str, auth: &Value, backend: Option<&str>) {
    c.execute(
        "INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id, service_principal_id,
           configuration_id, configuration_generation, document, harness_id, harness_version, harness_mode,
           execution_mode, compute_id, compute_implementation, harness_auth, backend_id, secret_bindings)
         SELECT $2, 'ns1', a.id, (SELECT coalesce(max(revision), 0) + 1 FROM occ.agent_revisions WHERE agent_id = a.id),
           'admin', a.service_principal_id, 'cfg', 1, '{}', 'codex', '1.0.0', 'dedicated', 'dedicated',
           'scripted', 'scripted', $3, $4, $5
         FROM occ.agents a WHERE a.id = $1",
        &[&agent, &id, auth, &backend, &json!({})],
    )
    .unwrap();
    c.execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, actor_id)
         VALUES ($1, 'ns1', $2, $3, 'admin')",
        &[&key(id), &agent, &id],
    )
    .unwrap();
}

#[test]
fn m2_step_1_an_account_of_another_namespace_is_invalid_and_a_withdrawn_read_is_denied() {
    let f = managed();
    let mut c = f.db.client();
    insert_namespace(&mut c, "ns2", "ready");
    let mut elsewhere = frozen();
    elsewhere["source"]["namespaceId"] = json!("ns2");
    insert_revision(&mut c, &f.agent, "rx", &elsewhere, Some("b1"));
    assert_refused(&f, "rx", "INVALID_HARNESS_AUTH");

    let f = managed();
    let mut c = f.db.client();
    let rev = deploy_managed(&mut c, &f.agent, "admin").unwrap();
    deny_read(&mut c, "admin");
    assert_refused(&f, &rev, "AUTHORIZATION_DENIED");
    let details: Value = crate::support::one(
        &mut c,
        "SELECT details FROM occ.audit_events WHERE action = 'openclaw.agents.deploy'",
        &[],
    );
    assert_eq!(
        details["denial"]["request"]["resource"],
        json!({"kind": "service_account", "id": "acct", "namespaceId": "ns1"}),
        "{details}"
    );
    assert_eq!(details["denial"]["request"]["action"], "read", "{details}");
}

#[test]
fn m2_step_2_a_backend_no_longer_configured_is_unavailable_for_any_auth_method() {
    let f = managed();
    let mut c = f.db.client();
    let rev = deploy_managed(&mut c, &f.agent, "admin").unwrap();
    c.execute("SELECT occ.backend_remove('admin', 'b1')", &[])
        .unwrap();
    assert_refused(&f, &rev, "BACKEND_UNAVAILABLE");

    // A `secret` harness auth on a backend that is not configured (seed 004 5086-5091).
    let f = managed();
    let mut c = f.db.client();
    let secret = json!({"method": "secret", "source": {"namespaceId": "ns1", "id": "key"}});
    insert_revision(&mut c, &f.agent, "rx", &secret, Some("gone"));
    assert_refused(&f, "rx", "BACKEND_UNAVAILABLE");
}

#[test]
fn m2_step_3_a_changed_or_missing_access_token_source_is_harness_auth_source_changed() {
    for change in [
        // Issued again with another Secret, or another key of it.
        "SELECT occ.service_account_create('ns1', 'acct', 'rotated/token', 'admin')",
        "SELECT occ.service_account_create('ns1', 'acct', 'chatgpt/other', 'admin')",
        // No longer an access token.
        "UPDATE occ.service_accounts SET credential = NULL",
        // Gone.
        "DELETE FROM occ.service_accounts",
    ] {
        let f = managed();
        let mut c = f.db.client();
        let rev = deploy_managed(&mut c, &f.agent, "admin").unwrap();
        c.batch_execute(change).unwrap();
        assert_refused(&f, &rev, "HARNESS_AUTH_SOURCE_CHANGED");
    }
    // The snapshot's side: a legacy snapshot without an access-token credential.
    let f = managed();
    let mut c = f.db.client();
    let mut legacy = frozen();
    legacy["credential"] = Value::Null;
    insert_revision(&mut c, &f.agent, "rx", &legacy, Some("b1"));
    assert_refused(&f, "rx", "HARNESS_AUTH_SOURCE_CHANGED");
}

#[test]
fn m2_step_4_a_binding_missing_invalid_or_different_is_service_account_backend_mismatch() {
    for change in [
        "DELETE FROM occ.service_account_bindings",
        "UPDATE occ.service_account_bindings SET credential_issued = false",
        "UPDATE occ.service_account_bindings SET driver_id = 'd2'",
        "UPDATE occ.service_account_bindings SET workspace_id = 'ws-2'",
        // Bound again to another configured backend.
        "SELECT occ.backend_add('admin', 'b2', 'chatgpt');
         SELECT occ.service_account_bind('ns1', 'acct', 'b2', 'chatgpt-driver', 'ws-1', 'admin')",
    ] {
        let f = managed();
        let mut c = f.db.client();
        let rev = deploy_managed(&mut c, &f.agent, "admin").unwrap();
        c.batch_execute(change).unwrap();
        assert_refused(&f, &rev, "SERVICE_ACCOUNT_BACKEND_MISMATCH");
    }
    // The snapshot's side: a legacy snapshot with no admitted binding.
    let f = managed();
    let mut c = f.db.client();
    let mut legacy = frozen();
    legacy["backendBinding"] = Value::Null;
    insert_revision(&mut c, &f.agent, "rx", &legacy, Some("b1"));
    assert_refused(&f, "rx", "SERVICE_ACCOUNT_BACKEND_MISMATCH");
}

#[test]
fn m2_the_four_checks_run_in_order_and_the_first_that_fails_decides() {
    // Five revisions admitted while everything was valid, held back; then every check is
    // broken, and each revision, released in turn after one more repair, fails with the first
    // check still broken. No Compute call until the last, which activates.
    let f = managed();
    let mut c = f.db.client();
    let revs: Vec<String> = (0..5)
        .map(|_| deploy_managed(&mut c, &f.agent, "admin").unwrap())
        .collect();
    c.execute(
        "UPDATE occ.work SET available_at = clock_timestamp() + interval '1 day'",
        &[],
    )
    .unwrap();
    deny_read(&mut c, "admin");
    c.batch_execute(
        "SELECT occ.backend_remove('admin', 'b1');
         UPDATE occ.service_accounts SET credential = '{\"kind\": \"access_token\", \"secretRef\": {\"name\": \"rotated\", \"key\": \"token\"}}';
         UPDATE occ.service_account_bindings SET workspace_id = 'ws-2';",
    )
    .unwrap();
    let repairs = [
        "",
        "DELETE FROM occ.iam_restrictions",
        "SELECT occ.backend_add('admin', 'b1', 'chatgpt')",
        "SELECT occ.service_account_create('ns1', 'acct', 'chatgpt/token', 'admin')",
        "UPDATE occ.service_account_bindings SET workspace_id = 'ws-1'",
    ];
    let codes = [
        "AUTHORIZATION_DENIED",
        "BACKEND_UNAVAILABLE",
        "HARNESS_AUTH_SOURCE_CHANGED",
        "SERVICE_ACCOUNT_BACKEND_MISMATCH",
    ];
    for (i, rev) in revs.iter().enumerate() {
        c.batch_execute(repairs[i]).unwrap();
        c.execute(
            "UPDATE occ.work SET available_at = clock_timestamp() WHERE idempotency_key = $1",
            &[&key(rev)],
        )
        .unwrap();
        let driver = Arc::new(ScriptedDriver::new());
        run_rev(&f, &driver, rev);
        let (state, code, _, _) = work(&mut c, &key(rev));
        if let Some(expected) = codes.get(i) {
            assert_eq!(
                (state.as_str(), code.as_deref()),
                ("failed_permanent", Some(*expected)),
                "revision {i}"
            );
            assert!(driver.calls().is_empty(), "{i}: {:?}", driver.calls());
        } else {
            assert_eq!(
                (state.as_str(), code.as_deref()),
                ("succeeded", Some("REVISION_ACTIVATED"))
            );
            assert_eq!(driver.calls_of("prepare_revision"), vec![rev.clone()]);
        }
    }
    assert_eq!(active(&mut c, &f.agent), Some(revs[4].clone()));
    // The one denial among them is audited; the other refusals are not.
    assert_eq!(audits(&mut c, "openclaw.agents.deploy").len(), 1);
}

#[test]
fn m2_a_read_granted_again_lifts_a_stored_refused_candidate_wait() {
    // Seed 004 226-238, 4299-4309: `read` withdrawn after the candidate was prepared refuses
    // it; its stop fails, so the refusal is stored with a pending stop. `read` is granted
    // again meanwhile: the next pass re-decides the refusal, finds it no longer stands, and
    // the deployment continues to activation.
    let f = managed();
    let mut c = f.db.client();
    let rev = deploy_managed(&mut c, &f.agent, "admin").unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    driver.script_prepare(&rev, vec![Prepare::Pending("REVISION_INCOMPLETE")]);
    driver.fail(
        "stop_revision",
        &rev,
        ComputeError::retryable("scripted", Some(500)),
    );
    let url = f.db.url.clone();
    let withdrawn = std::sync::atomic::AtomicBool::new(false);
    driver.on_call(move |method, _| {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        // `read` is withdrawn once, while the candidate is first prepared.
        if method == "prepare_revision"
            && !withdrawn.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            deny_read(&mut c, "admin");
        }
        if method == "stop_revision" {
            c.execute("DELETE FROM occ.iam_restrictions", &[]).unwrap();
        }
    });
    run_until(&f.db, driver.clone(), quiet);
    let (state, code, _, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("succeeded", Some("REVISION_ACTIVATED"))
    );
    assert_eq!(
        evidence(&mut c, &key(&rev)),
        vec![
            "deferred:REVISION_INCOMPLETE",
            "deferred:REFUSED_CANDIDATE_STOP_PENDING",
            "succeeded:REVISION_ACTIVATED"
        ]
    );
    let refusal: Option<String> = crate::support::one(
        &mut c,
        "SELECT a.refusal FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
             WHERE w.idempotency_key = $1 AND a.code = 'REFUSED_CANDIDATE_STOP_PENDING'",
        &[&key(&rev)],
    );
    assert_eq!(refusal.as_deref(), Some("AUTHORIZATION_DENIED"));
    assert_eq!(
        driver.log(),
        vec![
            format!("bind_agent:{}", f.agent),
            format!("prepare_revision:{rev}"),
            format!("bind_agent:{}", f.agent),
            format!("stop_revision:{rev}"),
            format!("bind_agent:{}", f.agent),
            format!("prepare_revision:{rev}"),
            format!("activate_revision:{rev}"),
        ]
    );
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn m3_the_driver_receives_the_admitted_harness_auth_and_secret_ref_never_a_value() {
    let f = managed();
    let mut c = f.db.client();
    let rev = deploy_managed(&mut c, &f.agent, "admin").unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    let prepared = driver.prepared.lock().clone();
    assert_eq!(prepared.len(), 1);
    let spec = &prepared[0];
    // Unchanged: the frozen harness auth itself, with no Secret projection (seed 004
    // 5395-5396).
    assert_eq!(spec.harness_auth, Some(frozen()));
    assert_eq!(spec.harness_secret, None);
    assert!(spec.secrets.is_empty());
    assert_eq!(spec.backend_id.as_deref(), Some("b1"));
    assert_eq!(
        spec.managed_account,
        Some(ManagedAccountAuth {
            namespace_id: "ns1".into(),
            id: "acct".into(),
            credential: Some(Credential::AccessToken {
                secret_ref: SecretRef {
                    name: "chatgpt".into(),
                    key: "token".into()
                }
            }),
            backend_binding: Some(BackendBinding {
                backend_id: "b1".into(),
                driver_id: "chatgpt-driver".into(),
                workspace_id: "ws-1".into(),
                credential_issued: true,
            }),
        })
    );
}

/// V1-V8 as files, then V9 on rows they wrote: the SQL the embedded migrations run.
fn migration(version: u32) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("V{version}__"))
        })
        .unwrap();
    std::fs::read_to_string(file).unwrap()
}

#[test]
fn m4_v9_keeps_existing_accounts_and_revisions_meaningful() {
    let db = TestDb::empty();
    let mut c = db.client();
    for v in 1..=8 {
        c.batch_execute(&format!("BEGIN; {} COMMIT;", migration(v)))
            .unwrap();
    }
    // Accounts as V1 stored them: a NAME/KEY reference on an available backend, an opaque one,
    // and one whose backend was unavailable; a revision on each, as V1 snapshotted them.
    c.batch_execute(
        "SELECT occ.bootstrap('inst', 'admin');
         INSERT INTO occ.namespaces_all (id, name, status, created_by) VALUES ('ns1', 'ns1', 'ready', 'admin');
         INSERT INTO occ.service_accounts (namespace_id, id, access_token_ref, backend_id, backend_available) VALUES
             ('ns1', 'a1', 'chatgpt/token', 'b1', true),
             ('ns1', 'a2', 'opaque-ref', 'b1', true),
             ('ns1', 'a3', 'chatgpt/token', 'b2', false);",
    )
    .unwrap();
    let (agent, _) = crate::agent::create_agent(&mut c, "ns1", "bot");
    for (rev, account, token, backend) in [
        ("r1", "a1", "chatgpt/token", "b1"),
        ("r2", "a2", "opaque-ref", "b1"),
        ("r3", "a3", "chatgpt/token", "b2"),
    ] {
        let auth = json!({"method": "service_account",
                          "source": {"namespaceId": "ns1", "id": account},
                          "accessTokenRef": token, "backendId": backend});
        c.execute(
            "INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id, service_principal_id,
               configuration_id, configuration_generation, document, harness_id, harness_version, harness_mode,
               execution_mode, compute_id, compute_implementation, harness_auth)
             SELECT $2, 'ns1', a.id, (SELECT coalesce(max(revision), 0) + 1 FROM occ.agent_revisions WHERE agent_id = a.id),
               'admin', a.service_principal_id, 'cfg', 1, '{}', 'codex', '1.0.0', 'dedicated', 'dedicated',
               'scripted', 'scripted', $3 FROM occ.agents a WHERE a.id = $1",
            &[&agent, &rev, &auth],
        )
        .unwrap();
    }
    c.batch_execute(&format!("BEGIN; {} COMMIT;", migration(9)))
        .unwrap();

    let accounts: Vec<(String, Option<Value>)> = c
        .query(
            "SELECT id, credential FROM occ.service_accounts ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let token = json!({"kind": "access_token", "secretRef": {"name": "chatgpt", "key": "token"}});
    assert_eq!(
        accounts,
        vec![
            ("a1".to_string(), Some(token.clone())),
            ("a2".to_string(), None),
            ("a3".to_string(), Some(token.clone())),
        ]
    );
    let backends: Vec<(String, String)> = c
        .query("SELECT id, type FROM occ.backends ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(backends, vec![("b1".to_string(), "chatgpt".to_string())]);
    let revisions: Vec<(String, Value, Option<String>)> = c
        .query(
            "SELECT id, harness_auth, backend_id FROM occ.agent_revisions ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let snapshot = |account: &str, credential: &Value| {
        json!({"method": "service_account", "source": {"namespaceId": "ns1", "id": account},
               "credential": credential, "backendBinding": null})
    };
    assert_eq!(
        revisions,
        vec![
            ("r1".into(), snapshot("a1", &token), Some("b1".into())),
            ("r2".into(), snapshot("a2", &Value::Null), Some("b1".into())),
            ("r3".into(), snapshot("a3", &token), Some("b2".into())),
        ]
    );
    // Still immutable afterwards.
    assert!(c
        .execute(
            "UPDATE occ.agent_revisions SET backend_id = 'b1' WHERE id = 'r3'",
            &[]
        )
        .is_err());
}

#[test]
fn m2_read_granted_on_exactly_the_account_is_enough_for_every_pass() {
    // The worker's IAM (src/iam.rs) decides the resource-scoped grant admission accepted.
    let f = managed();
    let mut c = f.db.client();
    c.batch_execute(
        "INSERT INTO occ.identities (id, kind) VALUES ('op', 'user');
         INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id)
         VALUES ('op', 'agent-operator', 'namespace', 'ns1');
         SELECT occ.binding_grant('admin', 'op', 'viewer', 'service_account:ns1/acct');",
    )
    .unwrap();
    let rev = deploy_managed(&mut c, &f.agent, "op").unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run_until(&f.db, driver.clone(), quiet);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    // Revoked, the next deployment's pass is denied on the account.
    let rev2 = deploy_managed(&mut c, &f.agent, "op").unwrap();
    c.execute(
        "SELECT occ.binding_revoke('admin', 'op', 'viewer', 'service_account:ns1/acct')",
        &[],
    )
    .unwrap();
    assert_refused(&f, &rev2, "AUTHORIZATION_DENIED");
}

// SPEC M5: the `runtime` harness auth names no Secret and no source: R2 accepts it with no
// Secret, account or source check (the service principal holds no grant on any Secret here),
// it reaches Compute unchanged, and the Kubernetes workload carries no harness credential.
#[test]
fn m5_runtime_auth_reaches_compute_unchanged_after_no_secret_or_source_check() {
    use crate::scripted::{quiet, run_until, ScriptedDriver};
    let db = crate::support::TestDb::bootstrapped();
    let mut c = db.client();
    crate::support::insert_namespace(&mut c, "ns1", "ready");
    c.execute(
        "SELECT occ.configuration_put('ns1', 'cfg', '{\"model\": \"m\"}', 'admin')",
        &[],
    )
    .unwrap();
    let agent: serde_json::Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_create('ns1', 'bot', 'admin')",
        &[],
    );
    let agent = agent["id"].as_str().unwrap().to_string();
    let admitted: serde_json::Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', NULL,
                'scripted', 'scripted', p_runtime_auth => true)",
        &[&agent],
    );
    let rev = admitted["revisionId"].as_str().unwrap().to_string();
    let stored: serde_json::Value = crate::support::one(
        &mut c,
        "SELECT harness_auth FROM occ.agent_revisions WHERE id = $1",
        &[&rev],
    );
    assert_eq!(stored, serde_json::json!({"method": "runtime"}));
    let driver = std::sync::Arc::new(ScriptedDriver::new());
    run_until(&db, driver.clone(), quiet);
    crate::support::expect_work(&mut c, &format!("agent_revision:{rev}:reconcile"))
        .completed_with("REVISION_ACTIVATED");
    let prepared = driver.prepared.lock().last().cloned().expect("prepared");
    assert_eq!(
        prepared.harness_auth,
        Some(serde_json::json!({"method": "runtime"}))
    );
    assert!(prepared.harness_secret.is_none());
    assert!(prepared.managed_account.is_none());
    assert!(prepared.credential_sources.is_empty());
    // Exactly one harness auth, whoever admits.
    let both = c
        .query_one(
            "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key',
                    'scripted', 'scripted', p_runtime_auth => true)",
            &[&agent],
        )
        .unwrap_err();
    assert!(
        both.to_string().contains("exactly one harness auth")
            || format!("{both:?}").contains("exactly one harness auth"),
        "{both:?}"
    );
    // The CLI takes it as one of the four methods, never beside another.
    let (code, _, stderr) = crate::cli::run(
        Some(&db.url),
        &[
            "admin",
            "agent",
            "deploy",
            "ns1",
            "bot",
            "--actor",
            "admin",
            "--configuration",
            "cfg",
            "--harness",
            "codex",
            "--mode",
            "dedicated",
            "--runtime-auth",
            "--harness-secret",
            "key",
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("mutually exclusive"), "{stderr}");
}
