//! A revision's repository credentials in the worker's passes (SPEC G10-G13, G19, G21): a
//! real worker, the scripted driver delivering them, and a scripted HTTPS sender.

use crate::agent::{active, fixture, stop, work, Fixture};
use crate::repository_sender::{opened, Answer, SenderServer};
use crate::revision::key;
use crate::scripted::{leak_sender, run_with, Opts, Prepare, ScriptedDriver};
use postgres::Client;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// No work running or due but maintenance buckets: a revision with repository credentials
/// always has its next one queued (SPEC G9).
fn quiet(c: &mut Client) -> bool {
    crate::support::scalar::<i64>(
        c,
        "SELECT count(*) FROM occ.work_status WHERE state = 'claimed'
            OR (state = 'queued' AND idempotency_key NOT LIKE '%:maintenance:%')",
    ) == 0
}

const APP: &str = "github.com/acme/app";
const LIB: &str = "github.com/acme/lib";

/// A sender answering every call as a working one does: each `open` a session named after
/// its admission (the scripted server answers one JSON per call, so one session id), `close`
/// closed, `status` closed.
fn sender() -> SenderServer {
    let s = SenderServer::start();
    s.answer("open", Answer::Json(opened("s-1", "git-material", "token")));
    s.answer("close", Answer::Json(json!({"closed": true})));
    s.answer("status", Answer::Json(json!({"state": "closed"})));
    s
}

fn opts(sender: &SenderServer) -> Opts {
    Opts {
        repository_sender: Some(leak_sender(sender.client(Duration::from_secs(5)))),
        ..Default::default()
    }
}

fn git_driver() -> Arc<ScriptedDriver> {
    Arc::new(ScriptedDriver {
        repository: true,
        ..ScriptedDriver::new()
    })
}

fn grant(c: &mut Client, reference: &str, scope: &str) {
    c.execute(
        "SELECT occ.repository_grant('admin', 'ns1', $1, $2)",
        &[&reference, &scope],
    )
    .unwrap();
}

/// Deploys `agent` with repository bindings `[(REF, scope)]` until a deadline, admitted with the
/// sender `git`.
fn deploy_git(c: &mut Client, agent: &str, bindings: &[(&str, &str)]) -> String {
    let repositories: Value = bindings
        .iter()
        .map(|(r, s)| json!({"repositoryRef": r, "scope": s}))
        .collect();
    let v: Value = crate::support::one(
        c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key',
             'scripted', 'scripted', p_repositories => $2, p_repository_sender_id => 'git')",
        &[&agent, &repositories],
    );
    v["revisionId"].as_str().unwrap().to_string()
}

/// `(REF, phase, admission id, session id)` of each session row of the revision, by REF.
fn sessions(c: &mut Client, revision: &str) -> Vec<(String, String, String, Option<String>)> {
    c.query(
        "SELECT repository_ref::text, phase, admission_id::text, session_id
         FROM occ.repository_sessions WHERE revision_id = $1 ORDER BY repository_ref, updated_at",
        &[&revision],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

fn phases(c: &mut Client, revision: &str) -> Vec<(String, String)> {
    sessions(c, revision)
        .into_iter()
        .map(|(r, p, _, _)| (r, p))
        .collect()
}

fn calls_to(sender: &SenderServer, call: &str) -> Vec<Value> {
    sender
        .calls()
        .into_iter()
        .filter(|c| c.path == format!("/sender/{call}"))
        .map(|c| c.body)
        .collect()
}

/// The attempts recorded for the work `key`.
fn attempts_of(c: &mut Client, key: &str) -> i64 {
    crate::support::one(
        c,
        "SELECT count(*) FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
         WHERE w.idempotency_key = $1",
        &[&key],
    )
}

/// The cause of the last attempt of the work `key`.
fn last_cause(c: &mut Client, key: &str) -> Option<String> {
    crate::support::one(
        c,
        "SELECT a.cause FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
         WHERE w.idempotency_key = $1 ORDER BY a.id DESC LIMIT 1",
        &[&key],
    )
}

/// Makes the queued work `key` due now, instead of at its recheck.
fn due_now(c: &mut Client, key: &str) {
    c.execute(
        "UPDATE occ.work SET available_at = clock_timestamp() WHERE idempotency_key = $1",
        &[&key],
    )
    .unwrap();
}

/// A fixture with both REFs granted (APP write, LIB read).
fn granted() -> Fixture {
    let f = fixture();
    let mut c = f.db.client();
    grant(&mut c, APP, "write");
    grant(&mut c, LIB, "read");
    f
}

#[test]
fn g19_sessions_open_before_preparation_reach_compute_and_a_stop_closes_them() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write"), (LIB, "read")]);
    let s = sender();
    let driver = git_driver();
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    let (state, code, _, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("succeeded", Some("REVISION_ACTIVATED"))
    );
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    // One `open` per binding, in order, each with the G20 request.
    let opens = calls_to(&s, "open");
    assert_eq!(opens.len(), 2, "{opens:?}");
    for (open, (reference, scope)) in opens.iter().zip([(APP, "write"), (LIB, "read")]) {
        assert_eq!(open["repositoryRef"], reference);
        assert_eq!(open["scope"], scope);
        assert_eq!(open["installationId"], "inst");
        assert_eq!(open["senderId"], "git");
        assert_eq!(open["namespaceId"], "ns1");
        assert_eq!(open["agentId"], f.agent.as_str());
        assert_eq!(open["revisionId"], rev.as_str());
        assert_eq!(open["kubernetesNamespace"], "occ-ns1");
        assert_eq!(open["standing"], false);
        assert!(open["deadlineAt"].as_str().is_some(), "{open}");
    }
    assert_eq!(
        phases(&mut c, &rev),
        [(APP.into(), "open".into()), (LIB.into(), "open".into())]
    );
    // Compute got the material with the revision, in binding order.
    let prepared = driver.prepared.lock().last().cloned().expect("prepared");
    let access = prepared.repository.expect("repository access");
    let materials: Vec<(&str, &str, &str)> = access
        .materials
        .iter()
        .map(|m| {
            (
                m.repository_ref.as_str(),
                m.secret_name.as_str(),
                m.key.as_str(),
            )
        })
        .collect();
    assert_eq!(
        materials,
        [
            (APP, "git-material", "token"),
            (LIB, "git-material", "token")
        ]
    );
    // SPEC G12: the Agent's stop closes the sessions before it stops the runtime.
    let stop_key = stop(&mut c, &f.agent, "admin");
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    assert_eq!(work(&mut c, &stop_key).0, "succeeded");
    assert_eq!(
        phases(&mut c, &rev),
        [
            (APP.into(), "disposed".into()),
            (LIB.into(), "disposed".into())
        ]
    );
    let closes = calls_to(&s, "close");
    assert_eq!(closes.len(), 2, "{closes:?}");
    assert!(closes
        .iter()
        .all(|c| c["sessionId"] == "s-1" && c["namespaceId"] == "ns1"));
    assert!(driver.calls_of("stop_revision").contains(&rev));
}

#[test]
fn g19_a_crash_before_the_answer_reopens_the_same_admission() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    // A pass wrote its `opening` row and died before the sender answered.
    let admission: String = crate::support::one(
        &mut c,
        "INSERT INTO occ.repository_sessions (namespace_id, agent_id, revision_id, admission_id,
             repository_ref) VALUES ('ns1', $1, $2, gen_random_uuid(), $3::text)
         RETURNING admission_id::text",
        &[&f.agent, &rev, &APP],
    );
    let s = sender();
    run_with(&f.db, git_driver(), opts(&s), quiet);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    let opens = calls_to(&s, "open");
    assert_eq!(opens.len(), 1);
    assert_eq!(opens[0]["admissionId"], admission.as_str());
    let rows = sessions(&mut c, &rev);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].1.as_str(), rows[0].2.as_str(), rows[0].3.as_deref()),
        ("open", admission.as_str(), Some("s-1"))
    );
}

#[test]
fn g21_no_answer_retries_with_its_code_and_a_refusal_is_permanent() {
    // No answer: the deployment retries with REPOSITORY_SENDER_UNAVAILABLE, the row stays
    // `opening`, and nothing is prepared.
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    s.answer("open", Answer::Status(503, json!({})));
    let driver = git_driver();
    run_with(&f.db, driver.clone(), opts(&s), |c| {
        crate::agent::evidence(c, &key(&rev)).len() >= 2
    });
    let evidence = crate::agent::evidence(&mut c, &key(&rev));
    assert!(
        evidence
            .iter()
            .all(|e| e == "retry:REPOSITORY_SENDER_UNAVAILABLE"),
        "{evidence:?}"
    );
    assert!(driver.calls_of("prepare_revision").is_empty());
    let rows = sessions(&mut c, &rev);
    assert_eq!(
        rows.len(),
        1,
        "one row, opened again with its admission: {rows:?}"
    );
    assert_eq!(rows[0].1, "opening");
    let admissions: Vec<Value> = calls_to(&s, "open")
        .iter()
        .map(|o| o["admissionId"].clone())
        .collect();
    assert!(admissions.len() >= 2 && admissions.iter().all(|a| *a == admissions[0]));
    // The sender answers again: the same admission opens and the revision activates.
    s.answer("open", Answer::Json(opened("s-1", "git-material", "token")));
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "open".into())]);

    // A refusal is permanent with the sender's code, the row disposed, nothing prepared.
    let g = granted();
    let mut c = g.db.client();
    let rev = deploy_git(&mut c, &g.agent, &[(APP, "write")]);
    let s = sender();
    s.answer(
        "open",
        Answer::Json(json!({"opened": false, "code": "REPOSITORY_NOT_CONFIGURED"})),
    );
    let driver = git_driver();
    run_with(&g.db, driver.clone(), opts(&s), quiet);
    let (state, code, _, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("REPOSITORY_NOT_CONFIGURED"))
    );
    assert!(driver.calls_of("prepare_revision").is_empty());
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "disposed".into())]);
    assert_eq!(active(&mut c, &g.agent), None);
}

/// Runs one deployment that G10 must refuse with `code` before any Compute call and any
/// sender call.
fn assert_refused_before_compute(
    f: &Fixture,
    rev: &str,
    driver: Arc<ScriptedDriver>,
    opts: Opts,
    s: &SenderServer,
    code: &str,
) {
    run_with(&f.db, driver.clone(), opts, quiet);
    let mut c = f.db.client();
    let (state, got, _, _) = work(&mut c, &key(rev));
    assert_eq!(
        (state.as_str(), got.as_deref()),
        ("failed_permanent", Some(code))
    );
    assert!(driver.calls().is_empty(), "{code}: {:?}", driver.calls());
    assert!(s.calls().is_empty(), "{code}: {:?}", s.calls());
    assert!(sessions(&mut c, rev).is_empty());
    assert_eq!(active(&mut c, &f.agent), None);
}

#[test]
fn g10_each_refusal_stops_a_candidate() {
    // A driver that delivers no repository credentials (Docker's case).
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let plain = Arc::new(ScriptedDriver::new());
    assert_refused_before_compute(
        &f,
        &rev,
        plain,
        opts(&s),
        &s,
        "REPOSITORY_RUNTIME_UNSUPPORTED",
    );

    // A recipient the driver cannot verify: the revision pins a Sandbox Driver the worker
    // does not run.
    let f = granted();
    let mut c = f.db.client();
    let repositories = json!([{"repositoryRef": APP, "scope": "write"}]);
    let v: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key',
             'scripted', 'scripted', p_repositories => $2, p_repository_sender_id => 'git',
             p_sandbox_driver_id => 'sb-other')",
        &[&f.agent, &repositories],
    );
    let rev = v["revisionId"].as_str().unwrap().to_string();
    let s = sender();
    assert_refused_before_compute(
        &f,
        &rev,
        git_driver(),
        opts(&s),
        &s,
        "REPOSITORY_RECIPIENT_UNVERIFIED",
    );
}

/// G19's *validate*: the selected sender not the snapshot's, no sender, or a REF no longer
/// granted at its scope, each refused permanently before any Compute or sender call; a grant
/// revoked once the sessions are open refuses at the next check and closes them first.
#[test]
fn g19_a_revoked_grant_or_sender_refuses() {
    // Another sender selected than the revision was admitted with (SPEC G16), or none.
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let mut other = s.entry(Duration::from_secs(5), false);
    other.id = "git-2".into();
    let other = occ_worker::repository::RepositorySender::new(&other, "inst").unwrap();
    let opts_other = Opts {
        repository_sender: Some(leak_sender(other)),
        ..Default::default()
    };
    assert_refused_before_compute(
        &f,
        &rev,
        git_driver(),
        opts_other,
        &s,
        "REPOSITORY_GIT_SENDER_UNQUALIFIED",
    );
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    assert_refused_before_compute(
        &f,
        &rev,
        git_driver(),
        Opts::default(),
        &s,
        "REPOSITORY_GIT_SENDER_UNQUALIFIED",
    );

    // A grant revoked, or lowered below the binding's scope, after admission.
    for lowered in [false, true] {
        let f = granted();
        let mut c = f.db.client();
        let rev = deploy_git(&mut c, &f.agent, &[(APP, "write"), (LIB, "read")]);
        if lowered {
            grant(&mut c, APP, "read");
        } else {
            c.execute("SELECT occ.repository_revoke('admin', 'ns1', $1)", &[&LIB])
                .unwrap();
        }
        let s = sender();
        assert_refused_before_compute(
            &f,
            &rev,
            git_driver(),
            opts(&s),
            &s,
            "REPOSITORY_GRANT_REVOKED",
        );
    }

    // A grant revoked while its sessions were open: the next check (after the sessions are
    // prepared) refuses, and the prepared candidate's sessions are closed before it stops.
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    let url = f.db.url.clone();
    driver.on_call(move |method, _target| {
        if method == "runtime_namespace" {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute("SELECT occ.repository_revoke('admin', 'ns1', $1)", &[&APP])
                .unwrap();
        }
    });
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    let (state, code, _, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("REPOSITORY_GRANT_REVOKED"))
    );
    assert!(driver.calls_of("prepare_revision").is_empty());
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "disposed".into())]);
    assert_eq!(calls_to(&s, "close").len(), 1);
    assert!(driver.calls_of("stop_revision").contains(&rev));
}

/// G19's *cleanup*: each `closing` or `invalidated` row is asked `status`; `closed` disposes
/// of it, `unknown` invalidates it (the sender cannot confirm disposal), and the cleanup stays
/// pending until no row is `closing` or `invalidated`.
#[test]
fn g19_cleanup_disposes_closed_and_invalidates_unknown() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write"), (LIB, "read")]);
    let s = sender();
    s.answer("open", Answer::Session(Duration::ZERO));
    let driver = git_driver();
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    // The stop cannot close the sessions: both stay `closing` under terminal-runtime cleanup.
    s.answer("close", Answer::Status(503, json!({})));
    s.answer("status", Answer::Status(503, json!({})));
    stop(&mut c, &f.agent, "admin");
    let cleanup = format!("agent_revision:{rev}:repository_cleanup:terminal-runtime");
    let watched = cleanup.clone();
    run_with(&f.db, driver.clone(), opts(&s), move |c| {
        attempts_of(c, &watched) >= 1
    });
    assert_eq!(
        phases(&mut c, &rev),
        [
            (APP.into(), "closing".into()),
            (LIB.into(), "closing".into())
        ]
    );
    // The sender answers `status`: the first session asked is closed, the second unknown.
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let (asked, shared) = (asked.clone(), s.answers_handle("status"));
        s.on_call("status", move || {
            let state = match asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => "closed",
                _ => "unknown",
            };
            shared(Answer::Json(json!({"state": state})));
        });
    }
    let before = attempts_of(&mut c, &cleanup);
    let status_before = calls_to(&s, "status").len();
    due_now(&mut c, &cleanup);
    let watched = cleanup.clone();
    run_with(&f.db, driver.clone(), opts(&s), move |c| {
        attempts_of(c, &watched) > before
    });
    let asked_sessions: Vec<String> = calls_to(&s, "status")[status_before..]
        .iter()
        .take(2)
        .map(|b| b["sessionId"].as_str().unwrap_or_default().to_string())
        .collect();
    let by_session: Vec<(Option<String>, String)> = sessions(&mut c, &rev)
        .into_iter()
        .map(|(_, phase, _, session)| (session, phase))
        .collect();
    let phase_of = |session: &str| {
        by_session
            .iter()
            .find(|(s, _)| s.as_deref() == Some(session))
            .map(|(_, p)| p.clone())
    };
    assert_eq!(
        asked_sessions
            .iter()
            .map(|s| phase_of(s))
            .collect::<Vec<_>>(),
        [
            Some("disposed".to_string()),
            Some("invalidated".to_string())
        ],
        "{by_session:?}"
    );
    assert_eq!(work(&mut c, &cleanup).0, "queued");
    let last = crate::agent::evidence(&mut c, &cleanup).pop();
    assert!(
        last.as_deref()
            .is_some_and(|e| e.ends_with(":REPOSITORY_CLEANUP_PENDING")),
        "{last:?}"
    );
    // Unsettled without a failed call, with an invalidated session: its cause says so (G3).
    assert_eq!(
        last_cause(&mut c, &cleanup).as_deref(),
        Some("REPOSITORY_ATTEMPT_INVALIDATED")
    );
    // Once the sender confirms the invalidated session closed, the cleanup settles.
    s.on_call("status", || {});
    s.answer("status", Answer::Json(json!({"state": "closed"})));
    due_now(&mut c, &cleanup);
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    assert_eq!(
        work(&mut c, &cleanup).1.as_deref(),
        Some("REPOSITORY_CLEANUP_COMPLETE")
    );
    assert_eq!(
        phases(&mut c, &rev),
        [
            (APP.into(), "disposed".into()),
            (LIB.into(), "disposed".into())
        ]
    );
}

#[test]
fn g11_missing_material_is_repaired_once_a_second_miss_is_invalid() {
    // One miss: the sessions are closed, opened again, and the revision activates.
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    driver.script_prepare(&rev, vec![Prepare::MaterialMissing, Prepare::Ready]);
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    assert_eq!(
        phases(&mut c, &rev),
        [(APP.into(), "disposed".into()), (APP.into(), "open".into())]
    );
    assert_eq!(calls_to(&s, "open").len(), 2);
    assert_eq!(calls_to(&s, "close").len(), 1);
    assert_eq!(driver.calls_of("prepare_revision").len(), 2);

    // Two misses in a row: INVALID_DRIVER_OBSERVATION.
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let driver = git_driver();
    driver.script_prepare(
        &rev,
        vec![Prepare::MaterialMissing, Prepare::MaterialMissing],
    );
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    let (state, code, _, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("INVALID_DRIVER_OBSERVATION"))
    );
    assert_eq!(driver.calls_of("prepare_revision").len(), 2);
}

#[test]
fn g11_a_malformed_missing_list_is_invalid() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    driver.script_prepare(&rev, vec![Prepare::MaterialMissingUnknown]);
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    let (state, code, _, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("INVALID_DRIVER_OBSERVATION"))
    );
    // No repair was tried.
    assert_eq!(calls_to(&s, "open").len(), 1);
    assert_eq!(driver.calls_of("prepare_revision").len(), 1);
}

#[test]
fn g12_sessions_are_closed_before_every_stop_and_an_unreachable_sender_leaves_cleanup() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    // The sender stops answering: the stop goes on, the session stays `closing`, and a
    // terminal-runtime cleanup is registered.
    s.answer("close", Answer::Status(503, json!({})));
    s.answer("status", Answer::Status(503, json!({})));
    let stop_key = stop(&mut c, &f.agent, "admin");
    let cleanup = format!("agent_revision:{rev}:repository_cleanup:terminal-runtime");
    let cleanup_key = cleanup.clone();
    run_with(&f.db, driver.clone(), opts(&s), move |c| {
        attempts_of(c, &cleanup_key) >= 1
    });
    assert_eq!(work(&mut c, &stop_key).0, "succeeded");
    assert!(driver.calls_of("stop_revision").contains(&rev));
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "closing".into())]);
    assert_eq!(work(&mut c, &cleanup).0, "queued");
    let last = crate::agent::evidence(&mut c, &cleanup).pop();
    assert!(
        last.as_deref()
            .is_some_and(|e| e.ends_with(":REPOSITORY_CLEANUP_PENDING")),
        "{last:?}"
    );
    let cause = last_cause(&mut c, &cleanup);
    assert_eq!(cause.as_deref(), Some("REPOSITORY_SENDER_UNAVAILABLE"));
    // The sender answers again: the cleanup asks `status`, disposes of the session and
    // completes.
    s.answer("status", Answer::Json(json!({"state": "closed"})));
    due_now(&mut c, &cleanup);
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    assert_eq!(
        work(&mut c, &cleanup).1.as_deref(),
        Some("REPOSITORY_CLEANUP_COMPLETE")
    );
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "disposed".into())]);
}

#[test]
fn g13_agent_deletion_waits_until_every_session_is_disposed() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    s.answer("close", Answer::Status(503, json!({})));
    s.answer("status", Answer::Status(503, json!({})));
    let deletion: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_delete('ns1', $1, 'admin')",
        &[&f.agent],
    );
    let deletion = deletion["work"].as_str().unwrap().to_string();
    let waiting = deletion.clone();
    run_with(&f.db, driver.clone(), opts(&s), move |c| {
        crate::agent::evidence(c, &waiting)
            .iter()
            .any(|e| e.ends_with(":REPOSITORY_CLEANUP_PENDING"))
    });
    // Every row intact, no attempt spent.
    let (state, _, _, attempts) = work(&mut c, &deletion);
    assert_eq!((state.as_str(), attempts), ("queued", 0));
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "closing".into())]);
    let agents: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.agents WHERE id = $1",
        &[&f.agent],
    );
    assert_eq!(agents, 1);
    // The sender answers again: the cleanup disposes of the session, then the deletion
    // completes.
    s.answer("status", Answer::Json(json!({"state": "closed"})));
    c.execute(
        "UPDATE occ.work SET available_at = clock_timestamp() WHERE state = 'queued'",
        &[],
    )
    .unwrap();
    run_with(&f.db, driver.clone(), opts(&s), |c| {
        crate::support::scalar::<i64>(
            c,
            "SELECT count(*) FROM occ.agents WHERE namespace_id = 'ns1'",
        ) == 0
    });
    let agents: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.agents WHERE id = $1",
        &[&f.agent],
    );
    assert_eq!(agents, 0, "deleted once every session was disposed");
}

#[test]
fn g9_a_revision_with_credentials_gets_maintenance_under_a_driver_without_an_interval() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    // The scripted driver declares no maintenance interval; the sender's cleanup interval is
    // 5 s.
    let mut entry = s.entry(Duration::from_secs(5), false);
    entry.cleanup_interval = Duration::from_secs(5);
    let sender5 = occ_worker::repository::RepositorySender::new(&entry, "inst").unwrap();
    let o = Opts {
        repository_sender: Some(leak_sender(sender5)),
        ..Default::default()
    };
    let driver = git_driver();
    assert!(driver.maintenance.is_none());
    run_with(&f.db, driver.clone(), o, |c| {
        crate::support::scalar::<i64>(
            c,
            "SELECT count(*) FROM occ.work_status WHERE state = 'claimed'
                OR (state = 'queued' AND idempotency_key NOT LIKE '%:maintenance:%')",
        ) == 0
    });
    assert_eq!(
        work(&mut c, &key(&rev)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    let due: f64 = crate::support::one(
        &mut c,
        "SELECT extract(epoch FROM available_at - clock_timestamp())::float8 FROM occ.work
         WHERE idempotency_key LIKE $1 AND state = 'queued'",
        &[&format!("agent_revision:{rev}:maintenance:%")],
    );
    assert!(
        due <= 5.0,
        "the next bucket is due within the cleanup interval: {due}"
    );
    // A revision without credentials under the same driver gets none.
    let g = fixture();
    let mut c = g.db.client();
    let plain = crate::agent::deploy(&mut c, &g.agent);
    run_with(
        &g.db,
        Arc::new(ScriptedDriver::new()),
        Opts::default(),
        quiet,
    );
    assert_eq!(
        work(&mut c, &key(&plain)).1.as_deref(),
        Some("REVISION_ACTIVATED")
    );
    let chains: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE '%:maintenance:%'",
        &[],
    );
    assert_eq!(chains, 0);
}

#[test]
fn g16_a_revision_of_another_sender_fails_the_deployment_at_once() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let mut other = s.entry(Duration::from_secs(5), false);
    other.id = "git-2".into();
    let other = occ_worker::repository::RepositorySender::new(&other, "inst").unwrap();
    let o = Opts {
        repository_sender: Some(leak_sender(other)),
        ..Default::default()
    };
    let driver = git_driver();
    run_with(&f.db, driver.clone(), o, quiet);
    let (state, code, _, attempts) = work(&mut c, &key(&rev));
    // At once: the first attempt, not the deadline.
    assert_eq!(
        (state.as_str(), code.as_deref(), attempts),
        (
            "failed_permanent",
            Some("REPOSITORY_GIT_SENDER_UNQUALIFIED"),
            1
        )
    );
    assert!(driver.calls().is_empty());
    assert!(s.calls().is_empty());
}

/// Options whose sender has a 1 s cleanup interval, so a revision with credentials gets its
/// maintenance buckets every second (SPEC G9).
fn fast_opts(sender: &SenderServer) -> Opts {
    let mut entry = sender.entry(Duration::from_secs(5), false);
    entry.cleanup_interval = Duration::from_secs(1);
    Opts {
        repository_sender: Some(leak_sender(
            occ_worker::repository::RepositorySender::new(&entry, "inst").unwrap(),
        )),
        ..Default::default()
    }
}

/// The revision's deadline moved into the past, as the clock would (the revision guard
/// refuses any change, so triggers are bypassed for this session).
fn expire_deadline(c: &mut Client, revision: &str) {
    c.batch_execute("SET session_replication_role = replica")
        .unwrap();
    c.execute(
        "UPDATE occ.agent_revisions SET repository_credentials = jsonb_set(repository_credentials,
             '{deadlineAt}', '\"2020-01-01T00:00:00.000Z\"') WHERE id = $1",
        &[&revision],
    )
    .unwrap();
    c.batch_execute("SET session_replication_role = origin")
        .unwrap();
}

/// The maintenance works of `revision` that completed with `code`.
fn maintenance_with(c: &mut Client, revision: &str, code: &str) -> i64 {
    crate::support::one(
        c,
        "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE $1 AND reason_code = $2",
        &[&format!("agent_revision:{revision}:maintenance:%"), &code],
    )
}

#[test]
fn g14_expiry_withdraws_git_and_keeps_the_runtime_and_chain() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "open".into())]);
    expire_deadline(&mut c, &rev);
    let watched = rev.clone();
    run_with(&f.db, driver.clone(), o, move |c| {
        maintenance_with(c, &watched, "REPOSITORY_ACCESS_WITHDRAWN") >= 2
    });
    // The session is closed and Git withdrawn; the runtime keeps running, still active, and
    // the chain goes on (a second withdrawn bucket came).
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "disposed".into())]);
    assert_eq!(calls_to(&s, "close").len(), 1);
    assert!(!driver
        .calls_of("retire_expired_repository_access")
        .is_empty());
    assert!(driver.calls_of("stop_revision").is_empty());
    assert!(driver.calls_of("retire_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    // No session was opened again past the deadline.
    assert_eq!(calls_to(&s, "open").len(), 1);
    let cleanups: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE $1",
        &[&format!("agent_revision:{rev}:repository_cleanup:%")],
    );
    assert_eq!(cleanups, 0);
}

#[test]
fn g14_a_runtime_that_cannot_drop_git_queues_terminal_runtime() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    driver
        .expiry
        .lock()
        .push_back(occ_worker::compute::RepositoryWithdrawal::RetireRuntime);
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    expire_deadline(&mut c, &rev);
    let cleanup = format!("agent_revision:{rev}:repository_cleanup:terminal-runtime");
    let watched = cleanup.clone();
    run_with(&f.db, driver.clone(), o, move |c| {
        crate::support::one::<i64>(
            c,
            "SELECT count(*) FROM occ.work_status WHERE idempotency_key = $1
                AND reason_code = 'REPOSITORY_CLEANUP_COMPLETE'",
            &[&watched],
        ) == 1
    });
    assert_eq!(
        maintenance_with(&mut c, &rev, "REPOSITORY_RUNTIME_RETIREMENT_QUEUED"),
        1
    );
    // The cleanup stopped the runtime and cleared the pointer; the chain ended.
    assert!(driver.calls_of("stop_revision").contains(&rev));
    assert_eq!(active(&mut c, &f.agent), None);
    let queued: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE $1 AND state = 'queued'",
        &[&format!("agent_revision:{rev}:maintenance:%")],
    );
    assert_eq!(queued, 0);
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "disposed".into())]);
}

/// Deploys `agent` with APP under its standing approval (SPEC G8), the approval made first.
fn deploy_standing(c: &mut Client, agent: &str) -> String {
    c.execute(
        "SELECT occ.repository_approve('admin', 'ns1', $1, $2, 'write')",
        &[&agent, &APP],
    )
    .unwrap();
    let repositories = json!([{"repositoryRef": APP, "scope": "write"}]);
    let v: Value = crate::support::one(
        c,
        "SELECT occ.agent_deploy('ns1', $1, 'admin', 'cfg', 'codex', 'dedicated', 'key',
             'scripted', 'scripted', p_repositories => $2, p_repository_sender_id => 'git',
             p_standing => true)",
        &[&agent, &repositories],
    );
    v["revisionId"].as_str().unwrap().to_string()
}

#[test]
fn g15_an_unverified_execution_defers_with_its_harness_state() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_standing(&mut c, &f.agent);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    // The execution that got the material was captured.
    let captured: Value = crate::support::one(
        &mut c,
        "SELECT execution FROM occ.repository_executions WHERE revision_id = $1",
        &[&rev],
    );
    assert_eq!(captured, json!([format!("pod-{rev}")]));
    // Another execution runs now: maintenance observes it and waits, never preparing.
    *driver.execution.lock() = Some(json!(["pod-other"]));
    *driver.harness_state.lock() = Some(occ_worker::compute::HarnessState::Starting);
    let prepared = driver.calls_of("prepare_revision").len();
    let watched = rev.clone();
    let events = crate::scripted::run_captured(&f.db, driver.clone(), o, move |c| {
        maintenance_attempts(c, &watched, "REPOSITORY_EXECUTION_UNVERIFIED") >= 2
    });
    assert_eq!(driver.calls_of("prepare_revision").len(), prepared);
    assert!(!driver.calls_of("observe_revision").is_empty());
    let deferred: Vec<Value> = events
        .named("worker.completed")
        .into_iter()
        .filter(|e| e["code"] == "REPOSITORY_EXECUTION_UNVERIFIED")
        .collect();
    assert!(!deferred.is_empty());
    assert!(
        deferred
            .iter()
            .all(|e| e["outcome"] == "pending" && e["harnessState"] == "starting"),
        "{deferred:?}"
    );
    assert!(driver.calls_of("stop_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    // Deferred, not failed: no maintenance work of the revision failed.
    let failed: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE $1 AND state LIKE 'failed%'",
        &[&format!("agent_revision:{rev}:maintenance:%")],
    );
    assert_eq!(failed, 0);
}

#[test]
fn g15_a_removed_approval_hands_off_to_standing_withdrawal() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_standing(&mut c, &f.agent);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    assert_eq!(calls_to(&s, "open")[0]["standing"], true);
    c.execute(
        "SELECT occ.repository_unapprove('admin', 'ns1', $1, $2)",
        &[&f.agent, &APP],
    )
    .unwrap();
    let watched = rev.clone();
    run_with(&f.db, driver.clone(), o, move |c| {
        maintenance_with(c, &watched, "REPOSITORY_ACCESS_WITHDRAWN") >= 1
    });
    // Handed off once, then withdrawn as an expired revision; the runtime keeps running.
    assert_eq!(
        maintenance_with(&mut c, &rev, "REPOSITORY_STANDING_APPROVAL_REMOVED"),
        1
    );
    let handoff = format!("agent_revision:{rev}:repository_cleanup:standing-withdrawal");
    assert_eq!(work(&mut c, &handoff).0, "succeeded");
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "disposed".into())]);
    assert!(driver.calls_of("stop_revision").is_empty());
    assert!(!driver
        .calls_of("retire_expired_repository_access")
        .is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));
    assert_eq!(calls_to(&s, "open").len(), 1);
}

/// Holds the revision's queued maintenance an hour off: once a standing-withdrawal cleanup
/// exists the revision is expired (SPEC G14), and a maintenance pass that falls due would
/// withdraw Git itself, meeting the driver's scripted answer before the cleanup does.
fn hold_maintenance(c: &mut Client, revision: &str) {
    c.execute(
        "UPDATE occ.work SET available_at = clock_timestamp() + interval '1 hour'
         WHERE idempotency_key LIKE $1 AND state = 'queued'",
        &[&format!("agent_revision:{revision}:maintenance:%")],
    )
    .unwrap();
}

/// Registers `kind` repository cleanup of the revision, as its cause would (SPEC G2).
fn register_cleanup(c: &mut Client, agent: &str, revision: &str, kind: &str) -> String {
    let key = format!("agent_revision:{revision}:repository_cleanup:{kind}");
    c.execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id, agent_target,
             actor_id) VALUES ($1, 'ns1', $2, $3, 'repository_cleanup', 'admin')",
        &[&key, &agent, &revision],
    )
    .unwrap();
    key
}

#[test]
fn g3_a_standing_withdrawal_cleanup_withdraws_git_or_hands_the_runtime_on() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    run_with(&f.db, driver.clone(), opts(&s), |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    // A withdrawal still rolling out leaves the cleanup waiting with its cause.
    driver
        .expiry
        .lock()
        .push_back(occ_worker::compute::RepositoryWithdrawal::Pending);
    hold_maintenance(&mut c, &rev);
    let cleanup = register_cleanup(&mut c, &f.agent, &rev, "standing-withdrawal");
    // Until a pass of the cleanup recorded its own outcome, the deferral, rather than any
    // evidence of the work.
    let watched = cleanup.clone();
    run_with(&f.db, driver.clone(), opts(&s), move |c| {
        crate::agent::evidence(c, &watched)
            .iter()
            .any(|e| e == "deferred:REPOSITORY_CLEANUP_PENDING")
    });
    let cause = last_cause(&mut c, &cleanup);
    assert_eq!(
        cause.as_deref(),
        Some("REPOSITORY_WITHDRAWAL_UNCONFIRMED"),
        "{:?}",
        crate::agent::evidence(&mut c, &cleanup)
    );
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "disposed".into())]);
    // Withdrawn: settled, the runtime kept.
    due_now(&mut c, &cleanup);
    let watched = cleanup.clone();
    run_with(&f.db, driver.clone(), opts(&s), move |c| {
        work(c, &watched).0 == "succeeded"
    });
    assert_eq!(
        work(&mut c, &cleanup).1.as_deref(),
        Some("REPOSITORY_CLEANUP_COMPLETE")
    );
    assert!(driver.calls_of("stop_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(rev.clone()));

    // A runtime that cannot drop Git is handed to terminal-runtime cleanup, which stops it.
    let g = granted();
    let mut c = g.db.client();
    let rev = deploy_git(&mut c, &g.agent, &[(APP, "write")]);
    let driver = git_driver();
    run_with(&g.db, driver.clone(), opts(&s), |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    driver
        .expiry
        .lock()
        .push_back(occ_worker::compute::RepositoryWithdrawal::RetireRuntime);
    hold_maintenance(&mut c, &rev);
    register_cleanup(&mut c, &g.agent, &rev, "standing-withdrawal");
    let terminal = format!("agent_revision:{rev}:repository_cleanup:terminal-runtime");
    let watched = terminal.clone();
    run_with(&g.db, driver.clone(), opts(&s), move |c| {
        crate::support::one::<i64>(
            c,
            "SELECT count(*) FROM occ.work WHERE idempotency_key = $1 AND state = 'succeeded'",
            &[&watched],
        ) == 1
    });
    assert!(driver.calls_of("stop_revision").contains(&rev));
    assert_eq!(active(&mut c, &g.agent), None);
}

#[test]
fn g10_a_refusal_ends_an_active_revisions_maintenance_chain() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    c.execute("SELECT occ.repository_revoke('admin', 'ns1', $1)", &[&APP])
        .unwrap();
    let watched = rev.clone();
    run_with(&f.db, driver.clone(), o, move |c| {
        crate::support::one::<i64>(
            c,
            "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE $1
                AND state IN ('queued', 'claimed')",
            &[&format!("agent_revision:{watched}:maintenance:%")],
        ) == 0
    });
    let failed: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work_status WHERE idempotency_key LIKE $1
            AND state = 'failed_permanent' AND reason_code = 'REPOSITORY_GRANT_REVOKED'",
        &[&format!("agent_revision:{rev}:maintenance:%")],
    );
    assert_eq!(failed, 1, "the chain ended with the refusal");
    // Unlike a candidate, the active revision is not stopped.
    assert!(driver.calls_of("stop_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn g10_a_refusal_before_the_success_is_published_fails_the_deployment() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    let url = f.db.url.clone();
    driver.on_call(move |method, _target| {
        if method == "activate_revision" {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            c.execute("SELECT occ.repository_revoke('admin', 'ns1', $1)", &[&APP])
                .unwrap();
        }
    });
    run_with(&f.db, driver.clone(), opts(&s), quiet);
    let (state, code, _, _) = work(&mut c, &key(&rev));
    assert_eq!(
        (state.as_str(), code.as_deref()),
        ("failed_permanent", Some("REPOSITORY_GRANT_REVOKED"))
    );
    assert!(
        crate::agent::audits(&mut c, "openclaw.agents.lifecycle.activate").is_empty(),
        "no activation was audited"
    );
}

#[test]
fn g14_a_denied_actor_retires_the_expired_runtime_and_is_audited() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    // The deploying actor may no longer deploy the Agent, and the deadline passes.
    c.execute(
        "INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id,
             resource_kind, resource_id)
         VALUES ('admin', ARRAY['deploy'], 'resource', 'ns1', 'agent', $1)",
        &[&f.agent],
    )
    .unwrap();
    expire_deadline(&mut c, &rev);
    let watched = rev.clone();
    run_with(&f.db, driver.clone(), o, move |c| {
        maintenance_with(c, &watched, "REPOSITORY_RUNTIME_RETIREMENT_QUEUED") == 1
    });
    let denials = crate::agent::audits(&mut c, "openclaw.agents.deploy");
    assert_eq!(denials.len(), 1, "{denials:?}");
    assert_eq!(
        (denials[0].0.as_str(), denials[0].3.as_str()),
        ("authorization_denial", f.agent.as_str())
    );
    let cleanup = format!("agent_revision:{rev}:repository_cleanup:terminal-runtime");
    let registered: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key = $1",
        &[&cleanup],
    );
    assert_eq!(registered, 1);
    // Git was never withdrawn in place: the runtime goes whole.
    assert!(driver
        .calls_of("retire_expired_repository_access")
        .is_empty());
}

#[test]
fn g14_a_moved_on_agent_queues_terminal_runtime() {
    // The revision's runtime retirement is already registered (expiry state `retiring`): its
    // maintenance never withdraws in place, it completes REPOSITORY_RUNTIME_RETIREMENT_QUEUED
    // and the chain ends.
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    // Registered as a superseding deployment's would be, but not yet run: it is due later.
    let cleanup = register_cleanup(&mut c, &f.agent, &rev, "terminal-runtime");
    c.execute(
        "UPDATE occ.work SET available_at = clock_timestamp() + interval '1 hour'
         WHERE idempotency_key = $1",
        &[&cleanup],
    )
    .unwrap();
    let watched = rev.clone();
    run_with(&f.db, driver.clone(), o, move |c| {
        maintenance_with(c, &watched, "REPOSITORY_RUNTIME_RETIREMENT_QUEUED") == 1
    });
    assert!(driver
        .calls_of("retire_expired_repository_access")
        .is_empty());
    let queued: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE $1 AND state = 'queued'",
        &[&format!("agent_revision:{rev}:maintenance:%")],
    );
    assert_eq!(queued, 0, "the chain ended");
    assert_eq!(work(&mut c, &cleanup).0, "queued");
}

/// Attempts of `revision`'s maintenance works that ended with `code` (deferrals included).
fn maintenance_attempts(c: &mut Client, revision: &str, code: &str) -> i64 {
    crate::support::one(
        c,
        "SELECT count(*) FROM occ.work_attempts a JOIN occ.work w ON w.id = a.work_id
         WHERE w.idempotency_key LIKE $1 AND a.code = $2",
        &[&format!("agent_revision:{revision}:maintenance:%"), &code],
    )
}

/// Works of `revision` whose key is `agent_revision:<revision>:<suffix>` in `state`.
fn works_in(c: &mut Client, revision: &str, suffix: &str, states: &[&str]) -> i64 {
    let states: Vec<String> = states.iter().map(|s| s.to_string()).collect();
    crate::support::one(
        c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key LIKE $1 AND state = ANY($2)",
        &[&format!("agent_revision:{revision}:{suffix}"), &states],
    )
}

#[test]
fn g14_a_withdrawn_model_key_retires_the_runtime() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    crate::credential_deploy::with_sources(&f, &mut c, &rev, "model", &[]);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    // The deadline passes and the model key is withdrawn (E18): a pending withdrawal row that
    // needs the runtime retired.
    expire_deadline(&mut c, &rev);
    crate::credential_deploy::withdrawal(
        &mut c,
        &f.agent,
        &rev,
        "model",
        "pending",
        Some("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT"),
    );
    let watched = rev.clone();
    run_with(&f.db, driver.clone(), o, move |c| {
        maintenance_with(c, &watched, "REPOSITORY_RUNTIME_RETIREMENT_QUEUED") == 1
    });
    // The runtime goes whole: terminal-runtime cleanup registered, Git never withdrawn in
    // place, no denial audited, and the chain ended.
    let cleanup = format!("agent_revision:{rev}:repository_cleanup:terminal-runtime");
    let registered: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key = $1",
        &[&cleanup],
    );
    assert_eq!(registered, 1);
    assert!(driver
        .calls_of("retire_expired_repository_access")
        .is_empty());
    assert!(crate::agent::audits(&mut c, "openclaw.agents.deploy").is_empty());
    assert_eq!(
        maintenance_with(&mut c, &rev, "REPOSITORY_ACCESS_WITHDRAWN"),
        0
    );
    assert_eq!(maintenance_with(&mut c, &rev, "CREDENTIAL_WITHDRAWN"), 0);
    assert_eq!(
        works_in(&mut c, &rev, "maintenance:%", &["queued", "claimed"]),
        0,
        "the chain ended"
    );
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "disposed".into())]);
}

#[test]
fn g14_a_secret_step_refusal_leaves_the_withdrawal_pending() {
    // SPEC G14, WS2: inside the expiry the Secret step's refusal (here the Agent's workspace
    // setup, which the scripted driver does not run) only leaves the withdrawal pending.
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    let _: Value = crate::support::one(
        &mut c,
        "SELECT occ.workspace_setup_put('admin', 'ns1', $1, $2)",
        &[&f.agent, &json!({"a": 1})],
    );
    expire_deadline(&mut c, &rev);
    let watched = rev.clone();
    run_with(&f.db, driver.clone(), o, move |c| {
        maintenance_attempts(c, &watched, "REPOSITORY_CLEANUP_PENDING") >= 2
    });
    // G4's pending completion: sessions closed, nothing withdrawn in place, nothing retired,
    // no cleanup registered, the runtime kept and still active.
    assert_eq!(phases(&mut c, &rev), [(APP.into(), "disposed".into())]);
    assert!(driver
        .calls_of("retire_expired_repository_access")
        .is_empty());
    assert!(driver.calls_of("stop_revision").is_empty());
    assert_eq!(
        works_in(
            &mut c,
            &rev,
            "repository_cleanup:%",
            &["queued", "claimed", "succeeded"]
        ),
        0
    );
    assert_eq!(
        maintenance_with(&mut c, &rev, "REPOSITORY_ACCESS_WITHDRAWN"),
        0
    );
    assert_eq!(
        maintenance_with(&mut c, &rev, "REPOSITORY_RUNTIME_RETIREMENT_QUEUED"),
        0
    );
    assert_eq!(
        maintenance_with(&mut c, &rev, "WORKSPACE_SETUP_UNSUPPORTED"),
        0
    );
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn g14_exhausted_retries_past_the_deadline_end_the_chain() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    let failed = |c: &mut Client| works_in(c, &rev, "maintenance:%", &["failed_permanent"]);
    let exhaust = || {
        for _ in 0..5 {
            driver.fail(
                "verify_repository_execution",
                &rev,
                occ_worker::compute::ComputeError::retryable("scripted", None),
            );
        }
    };
    // Before the deadline a maintenance claim that spends its attempts fails, and the chain
    // goes on: the next bucket is queued in the same transaction.
    exhaust();
    run_with(&f.db, driver.clone(), o, |c| failed(c) == 1);
    assert!(
        works_in(
            &mut c,
            &rev,
            "maintenance:%",
            &["queued", "claimed", "succeeded"]
        ) >= 1,
        "the chain is kept"
    );

    // The deadline passes during the last attempt: that failure is not continued.
    exhaust();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (url, revision, seen) = (f.db.url.clone(), rev.clone(), calls.clone());
    driver.on_call(move |method, _target| {
        if method == "verify_repository_execution"
            && seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 4
        {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            expire_deadline(&mut c, &revision);
        }
    });
    run_with(&f.db, driver.clone(), o, |c| failed(c) == 2);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(
        works_in(&mut c, &rev, "maintenance:%", &["queued", "claimed"]),
        0,
        "the chain ended"
    );
    // Nothing was withdrawn or retired by that failure: the runtime is still the active one.
    assert!(driver.calls_of("stop_revision").is_empty());
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn g15_an_observation_that_never_answers_defers_as_unknown() {
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_standing(&mut c, &f.agent);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    // Another execution runs, and the Harness never answers the observation: its 5 s bound
    // ends it, not the claim.
    *driver.execution.lock() = Some(json!(["pod-other"]));
    driver
        .observe_blocks
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let watched = rev.clone();
    let events = crate::scripted::run_captured(&f.db, driver.clone(), o, move |c| {
        maintenance_attempts(c, &watched, "REPOSITORY_EXECUTION_UNVERIFIED") >= 1
    });
    assert!(!driver.calls_of("observe_revision").is_empty());
    let deferred: Vec<Value> = events
        .named("worker.completed")
        .into_iter()
        .filter(|e| e["code"] == "REPOSITORY_EXECUTION_UNVERIFIED")
        .collect();
    assert!(!deferred.is_empty());
    assert!(
        deferred
            .iter()
            .all(|e| e["outcome"] == "pending" && e["harnessState"] == "unknown"),
        "{deferred:?}"
    );
    // The claim was never lost to the observation.
    assert!(events
        .named("worker.error")
        .iter()
        .all(|e| e["code"] != "CLAIM_LOST"));
    assert_eq!(active(&mut c, &f.agent), Some(rev));
}

#[test]
fn g14_a_secret_step_credential_withdrawn_retires_the_runtime() {
    // SPEC G14: the Secret step is decided on the sources read again under the heartbeat. A
    // model key withdrawn while the expiry pass runs (after the pass read its sources, while
    // the sender closes the session) is the Secret step's CREDENTIAL_WITHDRAWN: the runtime
    // retires, Git is never withdrawn in place.
    let f = granted();
    let mut c = f.db.client();
    let rev = deploy_git(&mut c, &f.agent, &[(APP, "write")]);
    crate::credential_deploy::with_sources(&f, &mut c, &rev, "model", &[]);
    let s = sender();
    let driver = git_driver();
    let o = fast_opts(&s);
    run_with(&f.db, driver.clone(), o, |c| {
        work(c, &key(&rev)).1.as_deref() == Some("REVISION_ACTIVATED")
    });
    expire_deadline(&mut c, &rev);
    let withdrawn = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (url, agent, revision, once) = (
        f.db.url.clone(),
        f.agent.clone(),
        rev.clone(),
        withdrawn.clone(),
    );
    s.on_call("close", move || {
        if !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            crate::credential_deploy::withdrawal(
                &mut c,
                &agent,
                &revision,
                "model",
                "pending",
                Some("CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT"),
            );
        }
    });
    let watched = rev.clone();
    run_with(&f.db, driver.clone(), o, move |c| {
        maintenance_with(c, &watched, "REPOSITORY_RUNTIME_RETIREMENT_QUEUED") == 1
    });
    assert!(withdrawn.load(std::sync::atomic::Ordering::SeqCst));
    // Decided by that very pass, which never waited.
    assert_eq!(
        maintenance_attempts(&mut c, &rev, "REPOSITORY_CLEANUP_PENDING"),
        0
    );
    assert!(driver
        .calls_of("retire_expired_repository_access")
        .is_empty());
    assert_eq!(
        maintenance_with(&mut c, &rev, "REPOSITORY_ACCESS_WITHDRAWN"),
        0
    );
    let registered: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.work WHERE idempotency_key = $1",
        &[&format!(
            "agent_revision:{rev}:repository_cleanup:terminal-runtime"
        )],
    );
    assert_eq!(registered, 1);
}
