//! SPEC section 9, `--wait` and `admin work watch`: a command that enqueues work follows it
//! until it ends, a line per change through a pipe and one redrawn line on a terminal, and
//! its exit code says how it ended (0 succeeded, 3 failed for good, 4 timed out), warning when
//! no worker seems to run. The worker is played by the test: it writes the attempts and the
//! outcome a pass would, between the lines it reads.

use crate::support::LoggedOutput;
use crate::support::TestDb;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStderr, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_occ-worker");

fn spawn(db: &TestDb, args: &[&str]) -> (Child, BufReader<ChildStderr>) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("OCC_DATABASE_URL", &db.url)
        .env_remove("OCC_COMPUTE_DRIVER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("occ-worker");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    (child, stderr)
}

/// The next stderr line, its seconds replaced by `N`.
fn line(stderr: &mut BufReader<ChildStderr>) -> String {
    let mut text = String::new();
    stderr.read_line(&mut text).expect("a line");
    seconds(text.trim_end())
}

/// `… 12 s` and `after 12 s` as `… N s`.
fn seconds(text: &str) -> String {
    let words: Vec<String> = text
        .split(' ')
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| {
            if w[1].starts_with('s') && !w[0].is_empty() && w[0].bytes().all(|b| b.is_ascii_digit())
            {
                "N".to_string()
            } else {
                w[0].to_string()
            }
        })
        .collect();
    let last = text.rsplit(' ').next().unwrap_or_default();
    if words.is_empty() {
        text.to_string()
    } else {
        format!("{} {last}", words.join(" "))
    }
}

/// The rest of stderr and the exit code.
fn finish(mut child: Child, mut stderr: BufReader<ChildStderr>) -> (i32, Vec<String>) {
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    (
        status.code().unwrap_or(-1),
        rest.lines().map(seconds).collect(),
    )
}

fn ensure_key(db: &TestDb, name: &str) -> String {
    let id: String = db
        .client()
        .query_one(
            "SELECT id FROM occ.namespaces_all WHERE name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    format!("namespace:{id}:ensure")
}

fn attempt(db: &TestDb, key: &str, code: &str) {
    db.client()
        .execute(
            "INSERT INTO occ.work_attempts (work_id, attempt, code, outcome)
             SELECT id, 1, $2, 'deferred' FROM occ.work WHERE idempotency_key = $1",
            &[&key, &code],
        )
        .unwrap();
}

fn end(db: &TestDb, key: &str, state: &str, code: &str) {
    db.client()
        .execute(
            "UPDATE occ.work SET state = $2, reason_code = $3, completed_at = clock_timestamp()
             WHERE idempotency_key = $1",
            &[&key, &state, &code],
        )
        .unwrap();
}

// O: through a pipe, --wait prints the admission's answer, then a line each time the state or
// the code changes, and exits 0 once the work succeeded.
#[test]
fn wait_prints_a_line_per_change_and_exits_zero_on_success() {
    let db = TestDb::bootstrapped();
    let (child, mut stderr) = spawn(
        &db,
        &[
            "admin",
            "namespace",
            "create",
            "team-w",
            "--actor",
            "admin",
            "--wait=60s",
        ],
    );
    let first = line(&mut stderr);
    let key = ensure_key(&db, "team-w");
    assert_eq!(first, format!("{key}: provisioning · N s"));
    attempt(&db, &key, "NAMESPACE_ROLEBINDING_PENDING");
    assert_eq!(
        line(&mut stderr),
        format!("{key}: provisioning · NAMESPACE_ROLEBINDING_PENDING · N s")
    );
    end(&db, &key, "succeeded", "NAMESPACE_READY");
    assert_eq!(
        finish(child, stderr),
        (0, vec![format!("{key}: succeeded · NAMESPACE_READY · N s")])
    );
}

// O: work that fails for good ends --wait with exit 3 and its code; `work watch` of work that
// already ended says so at once, with the same exit code.
#[test]
fn wait_exits_three_when_the_work_failed_for_good() {
    let db = TestDb::bootstrapped();
    let (child, mut stderr) = spawn(
        &db,
        &[
            "admin",
            "namespace",
            "create",
            "team-f",
            "--actor",
            "admin",
            "--wait",
        ],
    );
    line(&mut stderr);
    let key = ensure_key(&db, "team-f");
    end(&db, &key, "failed_permanent", "NAMESPACE_CONFLICT");
    assert_eq!(
        finish(child, stderr),
        (
            3,
            vec![
                format!("{key}: failed_permanent · NAMESPACE_CONFLICT · N s"),
                format!("occ-worker: namespace create: {key} failed: NAMESPACE_CONFLICT (admin work show {key})"),
            ]
        )
    );
    let (child, stderr) = spawn(&db, &["admin", "work", "watch", &key]);
    assert_eq!(
        finish(child, stderr),
        (
            3,
            vec![
                format!("{key}: failed_permanent · NAMESPACE_CONFLICT · N s"),
                format!("occ-worker: work watch: {key} failed: NAMESPACE_CONFLICT (admin work show {key})"),
            ]
        )
    );
}

// O, A2: an Agent's deletion removes its work with the Agent; --wait counts that as success.
#[test]
fn wait_on_an_agent_deletion_succeeds_when_its_rows_are_gone() {
    let (db, mut c) = TestDb::with_agent("team-b", "gone");
    let (child, mut stderr) = spawn(
        &db,
        &[
            "admin",
            "agent",
            "delete",
            "team-b",
            "gone",
            "--actor",
            "admin",
            "--wait=60s",
        ],
    );
    assert_eq!(line(&mut stderr), "agent:gone:delete: deleting · N s");
    let mut tx = c.transaction().unwrap();
    tx.execute(
        "INSERT INTO occ.audit_events (installation_id, namespace_id, kind, actor_id, action,
             resource_kind, resource_id, outcome, reason_code)
         VALUES ('inst', 'team-b', 'mutation', 'admin', 'openclaw.agents.lifecycle.delete',
             'agent', 'gone', 'success', 'AGENT_DELETED')",
        &[],
    )
    .unwrap();
    tx.query_one(
        include_str!("../../sql/queries/agent_delete_finalize.sql"),
        &[&"team-b", &"gone", &"gone-sp"],
    )
    .unwrap();
    tx.commit().unwrap();
    assert_eq!(
        finish(child, stderr),
        (
            0,
            vec!["agent:gone:delete: succeeded · AGENT_DELETED · N s".to_string()]
        )
    );
}

// O: with no worker alive, --wait warns after a few seconds, then gives up at its timeout with
// exit 4, saying the work goes on.
#[test]
fn wait_warns_without_a_worker_and_exits_four_at_its_timeout() {
    let db = TestDb::bootstrapped();
    let (child, mut stderr) = spawn(
        &db,
        &[
            "admin",
            "namespace",
            "create",
            "team-t",
            "--actor",
            "admin",
            "--wait=6s",
        ],
    );
    line(&mut stderr);
    let key = ensure_key(&db, "team-t");
    assert_eq!(
        finish(child, stderr),
        (
            4,
            vec![
                "warning: no worker has ever claimed work in this database: is `occ-worker run` running against this database?".to_string(),
                format!("occ-worker: namespace create: {key} is still provisioning after N s; the work goes on (admin work watch {key})"),
            ]
        )
    );
    let (code, _, stderr) = crate::cli::run(
        Some(&db.url),
        &[
            "admin",
            "namespace",
            "delete",
            "team-t",
            "--actor",
            "admin",
            "--wait=0",
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("a timeout is a positive number of seconds, or one with s, m or h (90s, 15m, 1h), up to a week"),
        "{stderr}"
    );
}

// O: on a terminal the progress is one line redrawn in place (a spinner, the state, the time
// waited), cleared before the last line. The terminal is util-linux `script`'s pseudo-terminal.
#[test]
fn on_a_terminal_wait_redraws_one_line() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no script(1) for a pseudo-terminal");
        return;
    }
    let db = TestDb::bootstrapped();
    let (code, text) = on_a_terminal(
        &db,
        "admin namespace create team-p --actor admin --json --wait=2s",
    );
    assert_eq!(code, Some(4), "{text}");
    let key = ensure_key(&db, "team-p");
    let (answer, progress) = text.split_once('\n').expect("the answer, then progress");
    assert!(answer.starts_with("{\"agents\":0,"), "{answer}");
    let draws: Vec<&str> = progress.split("\r\x1b[2K").collect();
    assert_eq!(draws[0], "", "{progress:?}");
    let (last, redrawn) = draws[1..].split_last().unwrap();
    assert!(
        redrawn.len() >= 4,
        "redrawn a few times a second: {progress:?}"
    );
    for draw in redrawn {
        let (frame, rest) = draw.split_at(draw.char_indices().nth(1).unwrap().0);
        assert!("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏".contains(frame), "{draw:?}");
        assert_eq!(seconds(rest), " provisioning · N s", "{draw:?}");
    }
    assert_eq!(
        seconds(last.trim_end()),
        format!("occ-worker: namespace create: {key} is still provisioning after N s; the work goes on (admin work watch {key})")
    );

    // Work that ended: its last line, marked, at once.
    end(&db, &key, "succeeded", "NAMESPACE_RECONCILED");
    let (code, text) = on_a_terminal(&db, &format!("admin work watch {key}"));
    assert_eq!(
        (code, seconds(&text)),
        (
            Some(0),
            format!("✓ {key}: succeeded · NAMESPACE_RECONCILED · N s\n")
        )
    );
    // A terminal that cannot clear a line gets the plain lines.
    let out = Command::new("script")
        .arg("-qec")
        .arg(format!("{BIN} admin work watch {key}"))
        .arg("/dev/null")
        .env("OCC_DATABASE_URL", &db.url)
        .env("TERM", "dumb")
        .stdin(Stdio::null())
        .logged_output("cli_wait.occ-worker")
        .expect("script");
    assert_eq!(
        seconds(&String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")),
        format!("{key}: succeeded · NAMESPACE_RECONCILED · N s\n")
    );
    // A table is the same on a terminal as through a pipe.
    let (code, table) = on_a_terminal(&db, "admin work list");
    let (_, piped, _) = crate::cli::run(Some(&db.url), &["admin", "work", "list"]);
    assert_eq!((code, table), (Some(0), piped));
}

/// `occ-worker ARGS` on `script`'s pseudo-terminal: its exit code and what the terminal showed.
fn on_a_terminal(db: &TestDb, args: &str) -> (Option<i32>, String) {
    let out = Command::new("script")
        .arg("-qec")
        .arg(format!("{BIN} {args}"))
        .arg("/dev/null")
        .env("OCC_DATABASE_URL", &db.url)
        .stdin(Stdio::null())
        .logged_output("cli_wait.occ-worker")
        .expect("script");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"),
    )
}

// O, Q9: an explicit retry of a failed deletion waits for the retry it queued.
#[test]
fn work_retry_waits_for_the_retry_it_queued() {
    let db = TestDb::bootstrapped();
    crate::cli::ok(
        &db,
        &["admin", "namespace", "create", "team-r", "--actor", "admin"],
    );
    let ensure = ensure_key(&db, "team-r");
    end(&db, &ensure, "succeeded", "NAMESPACE_RECONCILED");
    db.client()
        .execute(
            "UPDATE occ.namespaces_all SET status = 'ready' WHERE name = 'team-r'",
            &[],
        )
        .unwrap();
    crate::cli::ok(
        &db,
        &["admin", "namespace", "delete", "team-r", "--actor", "admin"],
    );
    let delete = ensure.replace(":ensure", ":delete");
    end(&db, &delete, "failed_permanent", "NAMESPACE_DELETE_FAILED");
    let (child, mut stderr) = spawn(
        &db,
        &[
            "admin",
            "work",
            "retry",
            &delete,
            "--actor",
            "admin",
            "--wait=60s",
        ],
    );
    let first = line(&mut stderr);
    let retry = format!("{delete}:2");
    assert_eq!(first, format!("{retry}: deleting · N s"));
    end(&db, &retry, "succeeded", "NAMESPACE_RECONCILED");
    assert_eq!(
        finish(child, stderr),
        (
            0,
            vec![format!("{retry}: succeeded · NAMESPACE_RECONCILED · N s")]
        )
    );
}

// O: Ctrl-C during --wait stops the wait, not the work: one line says where the work stands,
// that it goes on and how to follow it again, and the exit code is 130 (it used to print
// nothing).
#[test]
fn ctrl_c_during_wait_says_the_work_goes_on_and_how_to_follow_it() {
    let db = TestDb::bootstrapped();
    let (child, mut stderr) = spawn(
        &db,
        &[
            "admin",
            "namespace",
            "create",
            "team-i",
            "--actor",
            "admin",
            "--wait=60s",
        ],
    );
    // Following: the handler is in place before the first line.
    let first = line(&mut stderr);
    let key = ensure_key(&db, "team-i");
    assert_eq!(first, format!("{key}: provisioning · N s"));
    // SAFETY: kill(2) on a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    assert_eq!(
        finish(child, stderr),
        (
            130,
            vec![format!(
                "occ-worker: namespace create: stopped waiting after N s; {key} is still provisioning and the work goes on (admin work watch {key} follows it again)"
            )]
        )
    );
    let state: String = crate::support::one(
        &mut db.client(),
        "SELECT state FROM occ.work WHERE idempotency_key = $1",
        &[&key],
    );
    assert_eq!(state, "queued", "the work goes on");
}
