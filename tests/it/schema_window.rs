//! W8, the schema window (docs/operating.md, "Upgrading"): `run` and `check` refuse a schema
//! behind the migrations the binary embeds, or contracted by a newer release past what keeps
//! this binary working, in one line naming both versions and what to run, exit 2; a schema a
//! newer release only expanded is inside the window and the worker starts on it; `/readyz`
//! answers `SCHEMA_OUTSIDE_WINDOW` outside it.

use crate::support::LoggedOutput;
use crate::support::{http_get_text, wait_value, worker_env, TestDb, WorkerProcess};
use occ_worker::migrate::{newest_known, OLDEST_SUPPORTED};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// `occ-worker COMMAND` on `url` (Docker driver, an address nobody listens on): exit code and
/// stderr.
fn start_up(url: &str, command: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_occ-worker"))
        .arg(command)
        .env_clear()
        .env("OCC_DATABASE_URL", url)
        .env("OCC_COMPUTE_DRIVER", "docker")
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .env("OCC_WORKER_HTTP_ADDR", "127.0.0.1:0")
        .env("OCC_WORKER_DB_TIMEOUT_MS", "3000")
        .logged_output("schema_window.occ-worker")
        .expect("run occ-worker");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A newer release's migration as the schema records it: the history row `migrate` writes,
/// and the window it declares.
fn migrated_by_a_newer_release(db: &TestDb, version: i32, compatible_since: i32) {
    let mut c = db.client();
    c.execute(
        "INSERT INTO refinery_schema_history (version, name, applied_on, checksum)
         VALUES ($1, 'from_a_newer_release', now()::text, '0')",
        &[&version],
    )
    .unwrap();
    c.batch_execute(&format!(
        "CREATE OR REPLACE FUNCTION occ.schema_compatible_since() RETURNS integer
         LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT {compatible_since} $$"
    ))
    .unwrap();
}

#[test]
fn w8_a_database_one_migration_behind_refuses_start_up_in_one_line_naming_migrate() {
    let db = TestDb::empty();
    let knows = newest_known();
    occ_worker::migrate::run_to(&mut db.client(), knows - 1).expect("migrate one behind");
    for command in ["check", "run"] {
        let (code, stderr) = start_up(&db.url, command);
        assert_eq!(code, 2, "{command}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{command}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "occ-worker: the database schema is V{}, older than occ-worker {} runs on (V{knows}): run `occ-worker migrate`",
                knows - 1,
                env!("CARGO_PKG_VERSION")
            )),
            "{command}: {stderr}"
        );
    }
}

#[test]
fn w8_a_database_contracted_past_this_binary_by_a_newer_release_refuses_start_up_naming_the_upgrade(
) {
    let db = TestDb::bootstrapped();
    let knows = newest_known();
    migrated_by_a_newer_release(&db, knows + 2, knows + 1);
    for command in ["check", "run"] {
        let (code, stderr) = start_up(&db.url, command);
        assert_eq!(code, 2, "{command}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{command}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "occ-worker: the database schema is V{}, newer than occ-worker {} (V{knows}) tolerates (it keeps releases from V{} working): upgrade the binary",
                knows + 2,
                env!("CARGO_PKG_VERSION"),
                knows + 1
            )),
            "{command}: {stderr}"
        );
    }
}

// Inside the window: the schema this binary migrated, and one a newer release expanded while
// keeping this release working. The worker starts, claims nothing it should not, is ready.
#[test]
fn w8_inside_the_window_the_worker_starts_and_is_ready() {
    let db = TestDb::bootstrapped();
    let knows = newest_known();
    assert_eq!(
        occ_worker::migrate::read_schema(&mut db.client()).unwrap(),
        Some(occ_worker::migrate::SchemaVersion {
            version: knows,
            compatible_since: OLDEST_SUPPORTED
        }),
        "migrate declares this release's window"
    );
    for expanded in [false, true] {
        if expanded {
            migrated_by_a_newer_release(&db, knows + 1, knows);
        }
        let checked = crate::support::json_ok(
            &mut crate::support::worker_command(&["--json", "check"], &worker_env(&db.url)),
            "check",
        );
        assert_eq!(
            checked["schema"],
            serde_json::json!({"version": knows + i32::from(expanded),
                "compatibleSince": if expanded { knows } else { OLDEST_SUPPORTED },
                "knows": knows, "oldestSupported": OLDEST_SUPPORTED}),
            "expanded {expanded}"
        );
        let port = crate::support::free_port();
        let mut env = worker_env(&db.url);
        env.retain(|(k, _)| *k != "OCC_WORKER_HTTP_ADDR");
        env.push(("OCC_WORKER_HTTP_ADDR", format!("127.0.0.1:{port}")));
        env.push(("OCC_WORKER_SHUTDOWN_GRACE_MS", "100".into()));
        let worker = WorkerProcess::start("noop", &env);
        let ready = wait_value("/readyz 200", Duration::from_secs(20), || {
            http_get_text(("127.0.0.1", port), "/readyz").filter(|(status, _)| *status == 200)
        });
        assert!(
            ready.1.contains("\"ready\""),
            "expanded {expanded}: {ready:?}"
        );
        assert!(worker.has_event("worker.started"), "expanded {expanded}");
        worker.signal("TERM");
        let (status, stderr) = worker.wait(Duration::from_secs(20));
        assert!(status.success(), "expanded {expanded}: {stderr}");
    }
}

// A newer release contracts the schema past a running worker: its `/readyz` says so (code,
// both versions, the remedy) and a `worker.error` names it, within the probe's recheck.
#[test]
fn w6_readyz_answers_schema_outside_window_once_a_newer_release_contracts_past_it() {
    let db = TestDb::bootstrapped();
    let knows = newest_known();
    let port = crate::support::free_port();
    let mut env = worker_env(&db.url);
    env.retain(|(k, _)| *k != "OCC_WORKER_HTTP_ADDR");
    env.push(("OCC_WORKER_HTTP_ADDR", format!("127.0.0.1:{port}")));
    let worker = WorkerProcess::start("noop", &env);
    wait_value("/readyz 200", Duration::from_secs(20), || {
        http_get_text(("127.0.0.1", port), "/readyz").filter(|(status, _)| *status == 200)
    });
    migrated_by_a_newer_release(&db, knows + 1, knows + 1);
    let (_, body) = wait_value(
        "/readyz SCHEMA_OUTSIDE_WINDOW",
        occ_worker::health::SCHEMA_RECHECK + Duration::from_secs(10),
        || http_get_text(("127.0.0.1", port), "/readyz").filter(|(status, _)| *status == 503),
    );
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"status": "unavailable", "code": "SCHEMA_OUTSIDE_WINDOW",
                           "schema": knows + 1, "knows": knows, "remedy": "upgrade"})
    );
    let error = wait_value("worker.error", Duration::from_secs(5), || {
        worker
            .events()
            .into_iter()
            .find(|e| e["event"] == "worker.error" && e["code"] == "SCHEMA_OUTSIDE_WINDOW")
    });
    assert_eq!(error["remedy"], "upgrade", "{error}");
}

// A restarting or rolled-back older release runs `migrate` (the Deployment's init container)
// on a schema a newer release migrated: it applies nothing and leaves the newer release's
// functions as they are, so the window the newer release declared stands.
#[test]
fn migrate_of_an_older_release_leaves_a_newer_schema_as_it_is() {
    let db = TestDb::bootstrapped();
    let knows = newest_known();
    let declared = if OLDEST_SUPPORTED == knows {
        knows - 1
    } else {
        knows
    };
    migrated_by_a_newer_release(&db, knows + 1, declared);
    let report = occ_worker::migrate::run(&mut db.client()).expect("migrate");
    assert!(report.newer_schema, "{report:?}");
    assert!(report.applied.is_empty(), "{report:?}");
    assert_eq!(report.current, Some(knows + 1));
    assert_eq!(
        occ_worker::migrate::read_schema(&mut db.client()).unwrap(),
        Some(occ_worker::migrate::SchemaVersion {
            version: knows + 1,
            compatible_since: declared
        })
    );
}
