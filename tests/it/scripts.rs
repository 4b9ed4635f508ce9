//! The development scripts: a throwaway cluster keeps its data across a stop and a
//! start, and deletes it only on `--reset`; as root, a DIR the `postgres` user cannot reach is
//! refused with one line naming the user, the directory and the fix.

use postgres::{Client, NoTls};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

fn script(name: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("scripts")
            .join(name),
    )
    .args(args)
    .output()
    .expect("run script");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

// `scripts/pg-stop` then `scripts/pg-start` finds the same data; only `--reset`
// deletes it (the dev database used to vanish on the next start).
#[test]
fn a_stopped_cluster_restarts_with_its_data_until_reset() {
    let dir = format!("target/pg-persist-{}", std::process::id());
    let (ok, url, err) = script("pg-start", &[&dir]);
    assert!(ok, "pg-start: {err}");
    Client::connect(&url, NoTls)
        .unwrap()
        .batch_execute("CREATE DATABASE kept")
        .unwrap();
    let (ok, _, err) = script("pg-stop", &[&dir]);
    assert!(ok, "pg-stop: {err}");
    let (ok, url, err) = script("pg-start", &[&dir]);
    assert!(ok, "pg-start again: {err}");
    let mut c = Client::connect(&url, NoTls).unwrap();
    let kept: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname = 'kept'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(kept, 1, "the data survived the restart");
    drop(c);
    let (_, where_, _) = script("pg-dir", &[&dir]);
    let (ok, _, err) = script("pg-stop", &["--reset", &dir]);
    assert!(ok, "pg-stop --reset: {err}");
    assert!(!std::path::Path::new(&where_).exists(), "{where_} deleted");
}

// As root the server runs as `postgres`; an absolute DIR it cannot enter is refused
// at once, naming the user, the directory and the fix.
#[test]
fn a_cluster_directory_postgres_cannot_reach_is_refused_with_the_fix() {
    if !is_root() {
        eprintln!("skipping: only root runs the server as another user");
        return;
    }
    let private = std::env::temp_dir().join(format!("occ-private-{}", std::process::id()));
    std::fs::create_dir_all(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let dir = private.join("pg");
    let dir = dir.to_str().unwrap();
    let (ok, _, err) = script("pg-start", &[dir]);
    std::fs::remove_dir_all(&private).unwrap();
    assert!(!ok);
    assert_eq!(
        err,
        format!("pg-start: user postgres cannot write {dir} (a parent directory is not searchable by postgres): run as a non-root user, give a DIR postgres can reach, or chmod o+x each parent of {dir}\n")
    );
}

// The crash drill is opt-in (it runs for minutes), so the suite checks only that it starts as
// documented: `--help` names every option and the exit statuses, and a wrong argument is one
// line and exit status 2, before anything is built, started or touched.
#[test]
fn the_chaos_drill_documents_its_options_and_refuses_a_wrong_one() {
    let (ok, help, err) = script("chaos", &["--help"]);
    assert!(ok, "chaos --help: {err}");
    for option in [
        "--workers",
        "--threads",
        "--lease-ms",
        "--creations",
        "--kill-every",
        "--restart-after",
        "--no-kill",
        "--timeout",
        "--binary",
        "--out",
        "Exit status",
    ] {
        assert!(help.contains(option), "--help lacks {option}: {help}");
    }
    let out = Command::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("scripts")
            .join("chaos"),
    )
    .arg("--kill-everything")
    .output()
    .expect("run script");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--kill-everything"), "{err}");
}
