//! SPEC section 9, the operator's output: lists are aligned tables newest first with a limit
//! and a cursor, one object is `key: value` lines, `--json` is camelCase with every time in one
//! RFC 3339 form, and a Namespace or an Agent says what its work waits for. Tables are asserted
//! line by line, times replaced by `TIME` padded to their width.

use crate::cli::{ok, refused, run};
use crate::support::{insert_agent, insert_namespace, TestDb};
use serde_json::{json, Value};

/// `text` with every `YYYY-MM-DDTHH:MM:SS.mmmZ` replaced by `TIME` padded to the same width.
fn times(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if i + 24 <= b.len() && is_time(&text[i..i + 24]) {
            out.push_str(&format!("{:<24}", "TIME"));
            i += 24;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// One time as every answer prints it: UTC with milliseconds.
fn is_time(s: &str) -> bool {
    let shape = "dddd-dd-ddTdd:dd:dd.dddZ";
    s.len() == shape.len()
        && s.bytes().zip(shape.bytes()).all(|(c, p)| {
            if p == b'd' {
                c.is_ascii_digit()
            } else {
                c == p
            }
        })
}

fn lines(text: &str) -> Vec<String> {
    times(text)
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect()
}

/// Every key of `value`, nested ones included, except inside `details` and `document`.
fn keys(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                if k != "details" && k != "document" {
                    keys(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

/// Every string of `value` that looks like a time (starts with a date and a `T` or space).
fn time_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            let b = s.as_bytes();
            if b.len() > 11 && b[4] == b'-' && b[7] == b'-' && matches!(b[10], b'T' | b' ') {
                out.push(s.clone());
            }
        }
        Value::Object(map) => map.values().for_each(|v| time_strings(v, out)),
        Value::Array(items) => items.iter().for_each(|v| time_strings(v, out)),
        _ => {}
    }
}

/// Two Namespaces admitted through the CLI, team-a then team-c: their ids.
fn two_namespaces(db: &TestDb) -> (String, String) {
    let a = ok(
        db,
        &["admin", "namespace", "create", "team-a", "--actor", "admin"],
    );
    let c = ok(
        db,
        &["admin", "namespace", "create", "team-c", "--actor", "admin"],
    );
    (
        a["id"].as_str().unwrap().to_string(),
        c["id"].as_str().unwrap().to_string(),
    )
}

// O: `work list` is a table newest first; it filters by state, operation, Namespace, Agent
// and age, stops at --limit and says how to read on with --before; JSON is camelCase.
#[test]
fn work_list_is_a_table_newest_first_with_filters_and_a_cursor() {
    let db = TestDb::bootstrapped();
    let (a, c) = two_namespaces(&db);
    let url = Some(db.url.as_str());
    let (code, table, stderr) = run(url, &["admin", "work", "list"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        lines(&table),
        [
            "ID  KEY                           OPERATION         STATE   ATTEMPTS  REASON  CREATED"
                .to_string(),
            format!("2   namespace:{c}:ensure  namespace_ensure  queued  0         -       TIME"),
            format!("1   namespace:{a}:ensure  namespace_ensure  queued  0         -       TIME"),
        ]
    );
    let (code, page, stderr) = run(url, &["admin", "work", "list", "--limit", "1"]);
    assert_eq!(code, 0);
    assert_eq!(
        lines(&page)[1..],
        [format!(
            "2   namespace:{c}:ensure  namespace_ensure  queued  0         -       TIME"
        )]
    );
    assert_eq!(stderr, "(the newest 1; older ones: --before 2)\n");
    let (_, next, stderr) = run(
        url,
        &["admin", "work", "list", "--limit", "1", "--before", "2"],
    );
    assert_eq!(
        lines(&next)[1..],
        [format!(
            "1   namespace:{a}:ensure  namespace_ensure  queued  0         -       TIME"
        )]
    );
    assert_eq!(stderr, "(the newest 1; older ones: --before 1)\n");
    let keys_of = |args: &[&str]| -> Vec<Value> {
        let mut all = vec!["admin", "work", "list"];
        all.extend(args);
        ok(&db, &all)
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["key"].clone())
            .collect()
    };
    let ensure = |id: &str| json!(format!("namespace:{id}:ensure"));
    assert_eq!(keys_of(&["--namespace", "team-a"]), [ensure(&a)]);
    assert_eq!(
        keys_of(&["--state", "queued", "--operation", "namespace_ensure"]),
        [ensure(&c), ensure(&a)]
    );
    assert_eq!(keys_of(&["--state", "succeeded"]), Vec::<Value>::new());
    assert_eq!(
        keys_of(&["--operation", "namespace_delete"]),
        Vec::<Value>::new()
    );
    assert_eq!(keys_of(&["--since", "1h"]), [ensure(&c), ensure(&a)]);
    assert_eq!(
        keys_of(&["--since", "2999-01-01T00:00:00Z"]),
        Vec::<Value>::new()
    );
    // An empty page reads (none) (an unknown --agent is refused: cli::sibling_commands_agree…).
    let (_, none, _) = run(url, &["admin", "work", "list", "--state", "succeeded"]);
    assert_eq!(lines(&none)[1..], ["(none)"]);
    refused(
        url,
        &["admin", "work", "list", "--since", "yesterday"],
        2,
        "--since must be an RFC 3339 time such as 2026-01-31T12:00:00Z or an age such as 90s, 15m, 2h or 7d, got \"yesterday\"",
    );
    let rows = ok(&db, &["admin", "work", "list"]);
    let mut all = Vec::new();
    keys(&rows, &mut all);
    assert!(all.iter().all(|k| !k.contains('_')), "camelCase: {all:?}");
    assert!(all.contains(&"createdAt".to_string()) && all.contains(&"reasonCode".to_string()));
    let shown = ok(
        &db,
        &["admin", "work", "show", &format!("namespace:{a}:ensure")],
    );
    let mut all = Vec::new();
    keys(&shown, &mut all);
    assert!(all.iter().all(|k| !k.contains('_')), "camelCase: {all:?}");
    let (_, human, _) = run(
        url,
        &["admin", "work", "show", &format!("namespace:{a}:ensure")],
    );
    assert!(
        lines(&human).contains(&"state: queued".to_string()),
        "{human}"
    );
    assert!(
        lines(&human).contains(&"createdAt: TIME".to_string()),
        "{human}"
    );
}

// O: `audit` is a table newest first with --limit and --before; `namespace list` a table by
// name saying what each Namespace's work is doing.
#[test]
fn audit_and_namespace_list_are_tables() {
    let db = TestDb::bootstrapped();
    let (a, c) = two_namespaces(&db);
    let url = Some(db.url.as_str());
    let (code, table, stderr) = run(url, &["admin", "audit"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        lines(&table),
        [
            "ID  TIME                      ACTOR  ACTION                      RESOURCE               OUTCOME  REASON".to_string(),
            format!("2   TIME                      admin  openclaw.namespaces.create  namespace {c}  success  -"),
            format!("1   TIME                      admin  openclaw.namespaces.create  namespace {a}  success  -"),
        ]
    );
    let (_, page, stderr) = run(url, &["admin", "audit", "--limit", "1", "--before", "2"]);
    assert_eq!(lines(&page)[1..], [format!("1   TIME                      admin  openclaw.namespaces.create  namespace {a}  success  -")]);
    assert_eq!(stderr, "(the newest 1; older ones: --before 1)\n");
    let events = ok(&db, &["admin", "audit", "--namespace", "team-c"]);
    assert_eq!(events.as_array().unwrap().len(), 1);
    assert_eq!(events[0]["details"]["name"], json!("team-c"));

    db.client()
        .execute(
            "UPDATE occ.namespaces_all SET status = 'ready' WHERE name = 'team-c'",
            &[],
        )
        .unwrap();
    let (code, table, _) = run(url, &["admin", "namespace", "list"]);
    assert_eq!(code, 0);
    assert_eq!(
        lines(&table),
        [
            "NAME    ID           STATUS        AGENTS  WORK    CREATED".to_string(),
            format!("team-a  {a}  provisioning  0       queued  TIME"),
            format!("team-c  {c}  ready         0       queued  TIME"),
        ]
    );
    let (_, one, _) = run(url, &["admin", "namespace", "list", "--limit", "1"]);
    assert_eq!(lines(&one).len(), 2);
}

// O: every time in an answer has one form, UTC with milliseconds, whatever the server's time
// zone; an Agent and a Namespace say what their work waits for: the code of the latest
// attempt, since when that code has been reported, and the attempt.
#[test]
fn shows_say_what_work_waits_for_in_one_time_form() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    c.batch_execute(&format!(
        "ALTER DATABASE {} SET TimeZone = 'America/New_York'",
        db.name
    ))
    .unwrap();
    insert_namespace(&mut c, "team-b", "ready");
    insert_agent(&mut c, "team-b", "helper", 1);
    let (a, _) = two_namespaces(&db);
    let work: i64 = crate::support::one(
        &mut c,
        "SELECT id FROM occ.work WHERE namespace_id = $1",
        &[&a],
    );
    c.execute(
        "INSERT INTO occ.work_attempts (work_id, attempt, code, outcome, at) VALUES
             ($1, 1, 'COMPUTE_UNAVAILABLE', 'retry', '2026-01-31T12:00:00Z'),
             ($1, 2, 'NAMESPACE_ROLEBINDING_PENDING', 'deferred', '2026-01-31T12:00:10.5Z'),
             ($1, 3, 'NAMESPACE_ROLEBINDING_PENDING', 'deferred', '2026-01-31T12:00:20Z')",
        &[&work],
    )
    .unwrap();
    c.execute(
        "UPDATE occ.work SET attempt_count = 3 WHERE id = $1",
        &[&work],
    )
    .unwrap();
    let shown = ok(&db, &["admin", "namespace", "show", "team-a"]);
    assert_eq!(
        shown["waitingFor"],
        json!({"work": format!("namespace:{a}:ensure"), "state": "queued",
               "code": "NAMESPACE_ROLEBINDING_PENDING", "since": "2026-01-31T12:00:10.500Z",
               "attempt": 3, "nextAttemptAt": shown["waitingFor"]["nextAttemptAt"]})
    );
    let (_, human, _) = run(Some(&db.url), &["admin", "namespace", "show", "team-a"]);
    let human = lines(&human);
    let at = human
        .iter()
        .position(|l| l == "waitingFor:")
        .expect("waitingFor");
    assert_eq!(
        human[at..at + 7],
        [
            "waitingFor:",
            "  attempt: 3",
            "  code: NAMESPACE_ROLEBINDING_PENDING",
            "  nextAttemptAt: TIME",
            "  since: TIME",
            "  state: queued",
            &format!("  work: namespace:{a}:ensure"),
        ]
    );
    assert_eq!(
        ok(&db, &["admin", "namespace", "show", "team-b"])["waitingFor"],
        Value::Null
    );

    ok(
        &db,
        &[
            "admin", "agent", "stop", "team-b", "helper", "--actor", "admin",
        ],
    );
    let agent = ok(&db, &["admin", "agent", "show", "team-b", "helper"]);
    assert_eq!(agent["waitingFor"]["work"], json!("agent:helper:stop:1"));
    assert_eq!(agent["waitingFor"]["code"], Value::Null);
    assert_eq!(agent["waitingFor"]["attempt"], json!(0));
    let mut found = Vec::new();
    time_strings(&agent, &mut found);
    time_strings(&ok(&db, &["admin", "audit"]), &mut found);
    time_strings(&ok(&db, &["admin", "work", "list"]), &mut found);
    assert!(found.len() > 5, "{found:?}");
    assert!(found.iter().all(|t| is_time(t)), "one form: {found:?}");
}

// A2, O: an Agent's deletion removes its work rows; `work show` of such a key says so and
// points at the audit trail instead of a bare "no work".
#[test]
fn work_show_of_a_deleted_agent_points_at_the_audit_trail() {
    let (db, mut c) = TestDb::with_agent("team-b", "gone");
    let cfg = std::env::temp_dir().join(format!("occ-cli-gone-{}", db.name));
    std::fs::write(&cfg, r#"{"model":"gpt"}"#).unwrap();
    ok(
        &db,
        &[
            "admin",
            "configuration",
            "put",
            "team-b",
            "cfg",
            "--file",
            cfg.to_str().unwrap(),
            "--actor",
            "admin",
        ],
    );
    std::fs::remove_file(&cfg).unwrap();
    ok(
        &db,
        &[
            "admin",
            "secret",
            "create",
            "team-b",
            "key",
            "--backend-ref",
            "team-b/o/k",
            "--actor",
            "admin",
        ],
    );
    let deployed = ok(
        &db,
        &crate::support::deploy_args(
            "team-b",
            "gone",
            "cfg",
            &[
                "--compute-id",
                "docker",
                "--harness-secret",
                "key",
                "--actor",
                "admin",
            ],
        ),
    );
    let reconcile = deployed["work"].as_str().unwrap().to_string();
    let admitted = ok(
        &db,
        &[
            "admin", "agent", "delete", "team-b", "gone", "--actor", "admin",
        ],
    );
    assert_eq!(admitted["work"], json!("agent:gone:delete"));
    // What the deletion's last pass writes (reconcile::agent): its audit, then the finalizer.
    let mut tx = c.transaction().unwrap();
    tx.execute(
        "INSERT INTO occ.audit_events (installation_id, namespace_id, kind, actor_id, action,
             resource_kind, resource_id, outcome, reason_code, occurred_at)
         VALUES ('inst', 'team-b', 'mutation', 'admin', 'openclaw.agents.lifecycle.delete',
             'agent', 'gone', 'success', 'AGENT_DELETED', '2026-01-31T12:00:00Z')",
        &[],
    )
    .unwrap();
    let removed: i64 = tx
        .query_one(
            include_str!("../../sql/queries/agent_delete_finalize.sql"),
            &[&"team-b", &"gone", &"gone-sp"],
        )
        .unwrap()
        .get(0);
    assert_eq!(removed, 1);
    tx.commit().unwrap();
    let url = Some(db.url.as_str());
    refused(
        url,
        &["admin", "work", "show", "agent:gone:delete"],
        1,
        "work show refused: no work with key \"agent:gone:delete\": Agent gone was deleted at 2026-01-31T12:00:00.000Z and its work went with it (admin audit --namespace team-b)",
    );
    // A revision's work too, its Agent found from the deployment's admission.
    refused(
        url,
        &["admin", "work", "show", &reconcile],
        1,
        &format!("work show refused: no work with key {reconcile:?}: Agent gone was deleted at 2026-01-31T12:00:00.000Z and its work went with it (admin audit --namespace team-b)"),
    );
    refused(
        url,
        &["admin", "work", "show", "agent:never:delete"],
        1,
        "work show refused: no work with key \"agent:never:delete\"",
    );
}

// O: every list is a table and takes --limit: the catalog, backends and service accounts
// (nested fields as their own columns) as well as the IAM reads.
#[test]
fn every_list_is_a_table_with_a_limit() {
    let db = TestDb::bootstrapped();
    insert_namespace(&mut db.client(), "team-b", "ready");
    let url = Some(db.url.as_str());
    let table = |args: &[&str]| {
        let (code, out, stderr) = run(url, args);
        assert_eq!((code, stderr.as_str()), (0, ""), "{args:?}");
        lines(&out)
    };
    assert_eq!(
        table(&["admin", "harness", "list", "--limit", "2"]),
        [
            "ID     MODE       VERSION  APPROVED BY  APPROVED",
            "codex  dedicated  1.0.0    migration    TIME",
            "codex  embedded   1.0.0    migration    TIME",
        ]
    );
    ok(
        &db,
        &[
            "admin", "backend", "add", "b1", "--type", "chatgpt", "--actor", "admin",
        ],
    );
    assert_eq!(
        table(&["admin", "backend", "list"]),
        [
            "ID  TYPE     CREATED BY  CREATED",
            "b1  chatgpt  admin       TIME",
        ]
    );
    ok(
        &db,
        &[
            "admin",
            "service-account",
            "create",
            "team-b",
            "acct",
            "--access-token",
            "seat/token",
            "--actor",
            "admin",
        ],
    );
    assert_eq!(
        table(&["admin", "service-account", "list", "team-b"]),
        [
            "ID    ISSUED  ACCESS TOKEN  KEY    BACKEND  DRIVER  WORKSPACE  UPDATED",
            "acct  true    seat          token  -        -       -          TIME",
        ]
    );
    assert_eq!(table(&["admin", "role", "list", "--limit", "1"]).len(), 2);
    assert_eq!(
        table(&["admin", "identity", "list", "--limit", "1"]).len(),
        2
    );
    assert_eq!(table(&["admin", "grant", "list", "--limit", "1"]).len(), 2);
    assert_eq!(
        ok(&db, &["admin", "role", "list", "--limit", "3"])
            .as_array()
            .unwrap()
            .len(),
        3
    );
    for list in [
        vec!["admin", "group", "list", "--limit", "1"],
        vec!["admin", "agent", "list", "team-b", "--limit", "1"],
        vec!["admin", "secret", "list", "team-b", "--limit", "1"],
        vec!["admin", "configuration", "list", "team-b", "--limit", "1"],
    ] {
        assert_eq!(table(&list)[1..], ["(none)"], "{list:?}");
    }
}
