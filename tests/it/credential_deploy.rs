//! Credential sources in deployment (SPEC §13: E14, E16-E19) with a real worker and the
//! scripted driver: the sources a revision resolves to, the refusals of its resolution, revoked
//! sources detached again before every preparation, the maintenance paths of a withdrawn model
//! credential and of pending withdrawals, and the withdrawals an activation starts.

use crate::agent::{active, deploy, evidence, fixture, work, Fixture};
use crate::revision::{ended, key, maintenance_work, requeue, run};
use crate::scripted::{run_until, ScriptedDriver, GATEWAY};
use crate::support::scalar;
use occ_worker::compute::{ComputeError, CredentialAttachment};
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// Creates the source `id` (`model_key` or `tool`), owned by the scripted worker's gateway,
/// which the Agent's service principal may operate.
fn source(f: &Fixture, c: &mut Client, id: &str, kind: &str) {
    c.execute(
        "SELECT occ.credential_source_create('ns1', $1, $2, $3, NULL, $4, NULL, 'admin')",
        &[&id, &kind, &format!("ns1/{id}/key"), &GATEWAY],
    )
    .unwrap();
    c.execute(
        "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
         VALUES ($1, 'agent-operator', 'resource', 'ns1', 'credential_source', $2)",
        &[&f.principal, &id],
    )
    .unwrap();
}

fn snapshot_entry(id: &str, kind: &str, gateway: &str) -> Value {
    json!({"sourceId": id, "credentialGatewayId": gateway, "kind": kind, "driverId": GATEWAY,
           "backendRef": format!("ns1/{id}/key")})
}

/// Gives the admitted revision `rev` the harness source `harness` and the tool sources
/// `tools` (created here), as a deployment with `--credential-source` and `--tool-source`
/// freezes them. Revisions are immutable, so the guard trigger is bypassed for this one
/// statement (CHECK constraints still apply).
pub fn with_sources(f: &Fixture, c: &mut Client, rev: &str, harness: &str, tools: &[&str]) {
    source(f, c, harness, "model_key");
    let mut snapshot = vec![snapshot_entry(harness, "model_key", GATEWAY)];
    for tool in tools {
        source(f, c, tool, "tool");
        snapshot.push(snapshot_entry(tool, "tool", GATEWAY));
    }
    store_snapshot(c, rev, harness, GATEWAY, Value::Array(snapshot));
}

fn store_snapshot(c: &mut Client, rev: &str, harness: &str, gateway: &str, snapshot: Value) {
    let auth = json!({"method": "credential_source", "sourceId": harness,
                      "credentialGatewayId": gateway});
    let mut tx = c.transaction().unwrap();
    tx.batch_execute("SET LOCAL session_replication_role = replica")
        .unwrap();
    let n = tx
        .execute(
            "UPDATE occ.agent_revisions SET harness_auth = $2, credential_sources = $3 WHERE id = $1",
            &[&rev, &auth, &snapshot],
        )
        .unwrap();
    assert_eq!(n, 1);
    tx.commit().unwrap();
}

/// A withdrawal row of `rev`'s `source`, as a request and its attempts leave it.
pub fn withdrawal(
    c: &mut Client,
    agent: &str,
    rev: &str,
    source: &str,
    state: &str,
    reason: Option<&str>,
) {
    c.execute(
        "INSERT INTO occ.credential_withdrawals (namespace_id, agent_id, revision_id, source_id, state,
             requested_by, last_reason, last_at, revoked_at)
         VALUES ('ns1', $1, $2, $3, $4, 'admin', $5, CASE WHEN $5::text IS NULL THEN NULL ELSE now() END,
                 CASE WHEN $4 = 'revoked' THEN now() END)",
        &[&agent, &rev, &source, &state, &reason],
    )
    .unwrap();
}

/// A revoked withdrawal row of `rev`'s `source`.
fn revoked(f: &Fixture, c: &mut Client, rev: &str, source: &str) {
    withdrawal(
        c,
        &f.agent,
        rev,
        source,
        "revoked",
        Some("CREDENTIALS_WITHDRAWN"),
    );
}

fn attachments(driver: &ScriptedDriver) -> Vec<Vec<CredentialAttachment>> {
    driver
        .prepared
        .lock()
        .iter()
        .map(|s| s.credential_sources.clone())
        .collect()
}

fn attached(id: &str, kind: &str, harness: bool) -> CredentialAttachment {
    CredentialAttachment {
        source_id: id.into(),
        kind: kind.into(),
        harness,
        backend_ref: format!("ns1/{id}/key"),
    }
}

/// The withdrawal works of `rev`: (key, actor, state).
fn withdrawal_works(c: &mut Client, rev: &str) -> Vec<(String, String, String)> {
    c.query(
        "SELECT idempotency_key, actor_id, state FROM occ.work
         WHERE revision_id = $1 AND agent_target = 'credential_withdrawal' ORDER BY id",
        &[&rev],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

fn ends_with(c: &mut Client, k: &str, state: &str, code: &str) {
    let (got, reason, _, _) = work(c, k);
    assert_eq!(
        (got.as_str(), reason.as_deref()),
        (state, Some(code)),
        "{k}"
    );
}

#[test]
fn e19_resolved_sources_reach_compute_and_a_withdrawn_tool_source_is_left_out() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    with_sources(&f, &mut c, &rev, "model", &["search", "mail"]);
    revoked(&f, &mut c, &rev, "search");
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    ends_with(&mut c, &key(&rev), "succeeded", "REVISION_ACTIVATED");
    assert_eq!(
        attachments(&driver),
        [vec![
            attached("model", "model_key", true),
            attached("mail", "tool", false)
        ]]
    );
    // SPEC E17: the revoked source is detached again, before the preparation.
    let log = driver.log();
    let redetach = format!("withdraw_credential_source:{rev}/search/recheck");
    let at = |call: &str| log.iter().position(|c| c.starts_with(call));
    assert!(
        at(&redetach).unwrap() < at("prepare_revision").unwrap(),
        "{log:?}"
    );
}

#[test]
fn e19_a_withdrawn_harness_source_refuses_the_revision_before_any_compute_call() {
    // A lost Pod never brings a withdrawn model key back: the revision never prepares again.
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    with_sources(&f, &mut c, &rev, "model", &[]);
    withdrawal(&mut c, &f.agent, &rev, "model", "pending", None);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    ends_with(
        &mut c,
        &key(&rev),
        "failed_permanent",
        "CREDENTIAL_WITHDRAWN",
    );
    assert!(
        driver.calls_of("prepare_revision").is_empty(),
        "{:?}",
        driver.log()
    );
    assert!(driver.prepared.lock().is_empty());
}

#[test]
fn e19_each_resolution_refusal_is_permanent_and_prepares_nothing() {
    let f = fixture();
    let mut c = f.db.client();
    for (n, code) in [
        "CREDENTIAL_SOURCE_UNAVAILABLE",
        "HARNESS_AUTH_SOURCE_UNAVAILABLE",
        "CREDENTIAL_GATEWAY_MISMATCH",
    ]
    .into_iter()
    .enumerate()
    {
        let rev = deploy(&mut c, &f.agent);
        let (model, tool) = (format!("model-{n}"), format!("tool-{n}"));
        with_sources(&f, &mut c, &rev, &model, &[&tool]);
        let disable = |c: &mut Client, id: &str| {
            c.execute(
                "SELECT occ.credential_source_disable('ns1', $1, 'admin')",
                &[&id],
            )
            .unwrap();
        };
        match code {
            "CREDENTIAL_SOURCE_UNAVAILABLE" => disable(&mut c, &tool),
            "HARNESS_AUTH_SOURCE_UNAVAILABLE" => disable(&mut c, &model),
            _ => {
                let snapshot = json!([snapshot_entry(&model, "model_key", "gateway-2")]);
                store_snapshot(&mut c, &rev, &model, "gateway-2", snapshot);
            }
        }
        let driver = Arc::new(ScriptedDriver::new());
        run(&f, &driver);
        ends_with(&mut c, &key(&rev), "failed_permanent", code);
        assert!(driver.calls().is_empty(), "{code}: {:?}", driver.log());
    }
}

#[test]
fn e19_both_principals_need_operate_on_every_source_without_a_withdrawal() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    with_sources(&f, &mut c, &rev, "model", &["search"]);
    c.execute(
        "DELETE FROM occ.iam_bindings WHERE principal_id = $1 AND resource_id = 'search'",
        &[&f.principal],
    )
    .unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    ends_with(
        &mut c,
        &key(&rev),
        "failed_permanent",
        "AUTHORIZATION_DENIED",
    );
    assert!(driver.calls().is_empty(), "{:?}", driver.log());

    // A source with a withdrawal row is not asked about: it is left out instead.
    let rev = deploy(&mut c, &f.agent);
    let snapshot = json!([
        snapshot_entry("model", "model_key", GATEWAY),
        snapshot_entry("search", "tool", GATEWAY)
    ]);
    store_snapshot(&mut c, &rev, "model", GATEWAY, snapshot);
    withdrawal(
        &mut c,
        &f.agent,
        &rev,
        "search",
        "pending",
        Some("AUTHORIZATION_DENIED"),
    );
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    ends_with(&mut c, &key(&rev), "succeeded", "REVISION_ACTIVATED");
    assert_eq!(
        attachments(&driver),
        [vec![attached("model", "model_key", true)]]
    );
}

#[test]
fn e19_the_active_revision_takes_the_active_path_when_its_sources_no_longer_resolve() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    with_sources(&f, &mut c, &rev, "model", &["search"]);
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    c.execute(
        "SELECT occ.credential_source_disable('ns1', 'search', 'admin')",
        &[],
    )
    .unwrap();
    let k = key(&rev);
    requeue(&mut c, &k);
    driver.clear_calls();
    run_until(&f.db, driver.clone(), |c| evidence(c, &k).len() >= 2);
    let ev = evidence(&mut c, &k);
    assert!(
        ev[1..]
            .iter()
            .all(|e| e == "deferred:CREDENTIAL_SOURCE_UNAVAILABLE"),
        "{ev:?}"
    );
    assert_eq!(work(&mut c, &k).0, "queued", "deferred, not ended");
    assert!(
        driver.calls().is_empty(),
        "nothing stopped: {:?}",
        driver.log()
    );
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn e17_a_failing_redetach_fails_the_pass_as_a_preparation_error_does() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    with_sources(&f, &mut c, &rev, "model", &["search"]);
    revoked(&f, &mut c, &rev, "search");
    let driver = Arc::new(ScriptedDriver::new());
    driver.fail(
        "withdraw_credential_source",
        &format!("{rev}/search/recheck"),
        ComputeError::permanent("CREDENTIAL_WITHDRAWAL_MISCONFIGURED", "compute", None),
    );
    run(&f, &driver);
    ends_with(
        &mut c,
        &key(&rev),
        "failed_permanent",
        "CREDENTIAL_WITHDRAWAL_MISCONFIGURED",
    );
    assert!(
        driver.calls_of("prepare_revision").is_empty(),
        "{:?}",
        driver.log()
    );

    // A source whose driver is no longer the gateway's is an ownership conflict, no call.
    let rev = deploy(&mut c, &f.agent);
    let snapshot = json!([
        snapshot_entry("model", "model_key", GATEWAY),
        snapshot_entry("search", "tool", GATEWAY)
    ]);
    store_snapshot(&mut c, &rev, "model", GATEWAY, snapshot);
    revoked(&f, &mut c, &rev, "search");
    c.execute(
        "UPDATE occ.credential_sources SET driver_id = 'gateway-2' WHERE id = 'search'",
        &[],
    )
    .unwrap();
    let driver = Arc::new(ScriptedDriver::new());
    run(&f, &driver);
    ends_with(
        &mut c,
        &key(&rev),
        "failed_permanent",
        "CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT",
    );
    assert!(driver.calls_of("withdraw_credential_source").is_empty());
    assert!(driver.calls_of("prepare_revision").is_empty());
}

#[test]
fn e17_a_driver_without_the_call_prepares_without_a_redetach() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    with_sources(&f, &mut c, &rev, "model", &["search"]);
    revoked(&f, &mut c, &rev, "search");
    let driver = Arc::new(ScriptedDriver {
        credential_withdrawal: false,
        ..ScriptedDriver::default()
    });
    run(&f, &driver);
    ends_with(&mut c, &key(&rev), "succeeded", "REVISION_ACTIVATED");
    assert!(driver.calls_of("withdraw_credential_source").is_empty());
    assert_eq!(
        attachments(&driver),
        [vec![attached("model", "model_key", true)]]
    );
}

fn maintained() -> Arc<ScriptedDriver> {
    Arc::new(ScriptedDriver {
        maintenance: Some(Duration::from_secs(3600)),
        ..ScriptedDriver::default()
    })
}

/// An active revision with the harness source `model` and `tools`, deployed by a driver with
/// a maintenance interval (returned with it).
fn active_maintained(f: &Fixture, c: &mut Client, tools: &[&str]) -> (String, Arc<ScriptedDriver>) {
    let rev = deploy(c, &f.agent);
    with_sources(f, c, &rev, "model", tools);
    let driver = maintained();
    let k = key(&rev);
    run_until(&f.db, driver.clone(), |c| ended(c, &k));
    assert_eq!(active(c, &f.agent), Some(rev.clone()));
    (rev, driver)
}

/// The model key's withdrawal refused while its runtime runs; the search key revoked.
fn model_refused_search_revoked(f: &Fixture, c: &mut Client, rev: &str) {
    let refused = Some("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT");
    withdrawal(c, &f.agent, rev, "model", "pending", refused);
    withdrawal(
        c,
        &f.agent,
        rev,
        "search",
        "revoked",
        Some("CREDENTIALS_WITHDRAWN"),
    );
}

/// Replaces the revision's maintenance chain by one due bucket; its key.
fn next_maintenance(f: &Fixture, c: &mut Client, rev: &str) -> String {
    c.execute(
        "DELETE FROM occ.work WHERE operation = 'revision_maintenance'",
        &[],
    )
    .unwrap();
    maintenance_work(c, &f.agent, rev)
}

fn next_buckets(c: &mut Client, rev: &str) -> i64 {
    let n: i64 = crate::support::one(
        c,
        "SELECT count(*) FROM occ.work WHERE revision_id = $1 AND operation = 'revision_maintenance'
               AND idempotency_key <> $2",
        &[&rev, &format!("agent_revision:{rev}:maintenance:1")],
    );
    n
}

#[test]
fn e18_maintenance_of_a_withdrawn_model_credential_never_prepares_and_keeps_the_chain_while_pending(
) {
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = active_maintained(&f, &mut c, &["search"]);
    model_refused_search_revoked(&f, &mut c, &rev);
    let m = next_maintenance(&f, &mut c, &rev);
    driver.clear_calls();
    run_until(&f.db, driver.clone(), |c| ended(c, &m));
    ends_with(&mut c, &m, "succeeded", "CREDENTIAL_WITHDRAWN");
    assert_eq!(
        driver.log(),
        [format!("withdraw_credential_source:{rev}/search/recheck")],
        "E17 only, never a preparation"
    );
    // The model row awaits replay: nothing re-queued, but something is pending, so the chain
    // goes on.
    assert!(withdrawal_works(&mut c, &rev).is_empty());
    assert_eq!(next_buckets(&mut c, &rev), 1);

    // Once nothing is pending the chain ends.
    c.execute(
        "UPDATE occ.credential_withdrawals SET state = 'revoked', revoked_at = now() WHERE source_id = 'model'",
        &[],
    )
    .unwrap();
    let m = next_maintenance(&f, &mut c, &rev);
    run_until(&f.db, driver.clone(), |c| ended(c, &m));
    ends_with(&mut c, &m, "succeeded", "CREDENTIAL_WITHDRAWN");
    assert_eq!(next_buckets(&mut c, &rev), 0);
    assert!(driver.calls_of("prepare_revision").is_empty());
}

#[test]
fn e18_a_failing_redetach_takes_the_active_path_and_keeps_the_chain() {
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = active_maintained(&f, &mut c, &["search"]);
    model_refused_search_revoked(&f, &mut c, &rev);
    c.execute(
        "DELETE FROM occ.work WHERE operation = 'revision_maintenance'",
        &[],
    )
    .unwrap();
    driver.fail(
        "withdraw_credential_source",
        &format!("{rev}/search/recheck"),
        ComputeError::transient("kubernetes", Some(503)),
    );
    let m = maintenance_work(&mut c, &f.agent, &rev);
    run_until(&f.db, driver.clone(), |c| ended(c, &m));
    ends_with(&mut c, &m, "failed_permanent", "DEPENDENCY_UNAVAILABLE");
    assert_eq!(next_buckets(&mut c, &rev), 1, "the chain is kept");
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn e14_maintenance_requeues_one_withdrawal_per_revision_that_needs_an_attempt_and_goes_on() {
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = active_maintained(&f, &mut c, &["search", "mail"]);
    // Two pending rows of another requester, whose chain ended pending.
    c.execute(
        "INSERT INTO occ.credential_withdrawals (namespace_id, agent_id, revision_id, source_id,
             requested_by, last_reason, last_at)
         SELECT 'ns1', $1, $2, s, 'operator-2', 'CREDENTIAL_WITHDRAWAL_PENDING', now()
         FROM unnest(ARRAY['search', 'mail']) s",
        &[&f.agent, &rev],
    )
    .unwrap();
    let m = next_maintenance(&f, &mut c, &rev);
    driver.clear_calls();
    run_until(&f.db, driver.clone(), |c| ended(c, &m));
    ends_with(&mut c, &m, "succeeded", "REVISION_ALREADY_ACTIVE");
    let works = withdrawal_works(&mut c, &rev);
    assert_eq!(works.len(), 1, "one chain per revision: {works:?}");
    assert!(works[0]
        .0
        .starts_with(&format!("agent_revision:{rev}:credential_withdrawal:")));
    assert_eq!(works[0].1, "operator-2", "the requester is the actor");
    // Maintenance went on: the withdrawn tool sources are left out of its preparation.
    assert_eq!(
        attachments(&driver).last().unwrap(),
        &vec![attached("model", "model_key", true)]
    );

    // Rows that await replay are not re-queued.
    c.execute(
        "DELETE FROM occ.work WHERE agent_target = 'credential_withdrawal'",
        &[],
    )
    .unwrap();
    c.execute(
        "UPDATE occ.credential_withdrawals SET last_reason = 'AUTHORIZATION_DENIED'",
        &[],
    )
    .unwrap();
    let m = next_maintenance(&f, &mut c, &rev);
    run_until(&f.db, driver.clone(), |c| ended(c, &m));
    ends_with(&mut c, &m, "succeeded", "REVISION_ALREADY_ACTIVE");
    assert!(withdrawal_works(&mut c, &rev).is_empty());
}

#[test]
fn e16_an_activation_starts_the_withdrawals_that_waited_for_a_runtime_retirement() {
    let f = fixture();
    let mut c = f.db.client();
    let first = deploy(&mut c, &f.agent);
    with_sources(&f, &mut c, &first, "model", &[]);
    run(&f, &Arc::new(ScriptedDriver::new()));
    assert_eq!(active(&mut c, &f.agent), Some(first.clone()));
    // The running harness could not drop its model key.
    withdrawal(
        &mut c,
        &f.agent,
        &first,
        "model",
        "pending",
        Some("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT"),
    );
    // A new revision replaces it; one refused the same way before it activated gets its own
    // `activation` attempt.
    let second = deploy(&mut c, &f.agent);
    let snapshot = json!([snapshot_entry("model", "model_key", GATEWAY)]);
    store_snapshot(&mut c, &second, "model", GATEWAY, snapshot);
    c.execute(
        "INSERT INTO occ.credential_withdrawals (namespace_id, agent_id, revision_id, source_id,
             state, requested_by, last_reason, last_at)
         VALUES ('ns1', $1, $2, 'model', 'pending', 'operator-2',
                 'CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT', now())",
        &[&f.agent, &second],
    )
    .unwrap();
    // Its own row is withdrawn, so it is refused: use a third, clean revision to activate.
    let third = deploy(&mut c, &f.agent);
    let k = key(&third);
    run_until(&f.db, Arc::new(ScriptedDriver::new()), |c| ended(c, &k));
    ends_with(&mut c, &k, "succeeded", "REVISION_ACTIVATED");
    assert_eq!(
        withdrawal_works(&mut c, &first)
            .into_iter()
            .map(|(k, a, _)| (k, a))
            .collect::<Vec<_>>(),
        [(
            format!("agent_revision:{first}:credential_withdrawal:retirement"),
            "admin".to_string()
        )]
    );
    let second_works = withdrawal_works(&mut c, &second);
    assert_eq!(second_works.len(), 1, "{second_works:?}");
    assert_eq!(
        (second_works[0].0.as_str(), second_works[0].1.as_str()),
        (
            format!("agent_revision:{second}:credential_withdrawal:retirement").as_str(),
            "operator-2"
        )
    );
}

#[test]
fn e16_the_activated_revision_gets_its_activation_attempt() {
    let f = fixture();
    let mut c = f.db.client();
    let rev = deploy(&mut c, &f.agent);
    with_sources(&f, &mut c, &rev, "model", &["search"]);
    withdrawal(
        &mut c,
        &f.agent,
        &rev,
        "search",
        "pending",
        Some("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT"),
    );
    let k = key(&rev);
    let driver = Arc::new(ScriptedDriver::new());
    run_until(&f.db, driver.clone(), |c| ended(c, &k));
    ends_with(&mut c, &k, "succeeded", "REVISION_ACTIVATED");
    let works = withdrawal_works(&mut c, &rev);
    assert_eq!(works.len(), 1, "{works:?}");
    assert_eq!(
        works[0].0,
        format!("agent_revision:{rev}:credential_withdrawal:activation")
    );
    let n: i64 = scalar(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE '%:retirement'",
    );
    assert_eq!(n, 0);
}

#[test]
fn o_agent_show_names_each_revisions_auth_method_sources_and_withdrawals() {
    // What an operator responding to a leaked key reads first: which revision holds which
    // source, and where each withdrawal stands.
    let f = fixture();
    let mut c = f.db.client();
    source(&f, &mut c, "model", "model_key");
    source(&f, &mut c, "search", "tool");
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', NULL,
                 'scripted', 'scripted', p_credential_source => 'model',
                 p_tool_sources => ARRAY['search'], p_credential_gateway_id => $2)",
        &[&f.agent, &GATEWAY],
    );
    let rev = v["revisionId"].as_str().unwrap().to_string();
    run(&f, &Arc::new(ScriptedDriver::new()));
    ends_with(&mut c, &key(&rev), "succeeded", "REVISION_ACTIVATED");
    c.execute(
        "SELECT occ.credential_withdrawal_request('admin', 'ns1', $1, 'search')",
        &[&f.agent],
    )
    .unwrap();
    let shown: Value = crate::support::one(&mut c, "SELECT occ.agent_show('ns1', $1)", &[&f.agent]);
    let revision = &shown["revisions"][0];
    assert_eq!(revision["harnessAuthMethod"], "credential_source");
    assert_eq!(
        revision["credentialSources"],
        json!([{"sourceId": "model", "kind": "model_key"}, {"sourceId": "search", "kind": "tool"}])
    );
    assert_eq!(
        revision["withdrawals"],
        json!([{"sourceId": "search", "state": "pending", "requestedBy": "admin", "lastReason": null}])
    );
    assert_eq!(revision["sandboxFacets"], json!([]));
    assert_eq!(shown["sandboxPolicy"], Value::Null);
}

// SPEC E14, E18 before Z1 (seed 4457-4472 before 5270-5279): a maintenance pass re-queues the
// pending withdrawals first, even when the execution admission is then refused and the pass
// takes the active path.
#[test]
fn e14_maintenance_requeues_pending_withdrawals_before_the_execution_admission_check() {
    let f = fixture();
    let mut c = f.db.client();
    let (rev, driver) = active_maintained(&f, &mut c, &["search"]);
    c.execute(
        "INSERT INTO occ.credential_withdrawals (namespace_id, agent_id, revision_id, source_id,
             requested_by, last_reason, last_at)
         VALUES ('ns1', $1, $2, 'search', 'operator-2', 'CREDENTIAL_WITHDRAWAL_PENDING', now())",
        &[&f.agent, &rev],
    )
    .unwrap();
    // The driver no longer runs the revision's execution admission and offers no withdrawal.
    driver.run_admissions(Vec::new());
    let m = next_maintenance(&f, &mut c, &rev);
    run_until(&f.db, driver.clone(), |c| ended(c, &m));
    ends_with(
        &mut c,
        &m,
        "failed_permanent",
        "EXECUTION_ADMISSION_UNAVAILABLE",
    );
    let works = withdrawal_works(&mut c, &rev);
    assert_eq!(works.len(), 1, "re-queued first: {works:?}");
    assert_eq!(works[0].1, "operator-2");
}
