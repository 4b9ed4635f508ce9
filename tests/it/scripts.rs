//! The development scripts: a throwaway cluster keeps its data across a stop and a
//! start, and deletes it only on `--reset`; as root, a DIR the `postgres` user cannot reach is
//! refused with one line naming the user, the directory and the fix.

use postgres::{Client, NoTls};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

/// `scripts/NAME` as a command to run.
fn script_command(name: &str) -> Command {
    Command::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("scripts")
            .join(name),
    )
}

fn script(name: &str, args: &[&str]) -> (bool, String, String) {
    let out = script_command(name)
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

/// `scripts/NAME --help` succeeds and names each of `words`.
fn assert_documents(name: &str, words: &[&str]) {
    let (ok, help, err) = script(name, &["--help"]);
    assert!(ok, "{name} --help: {err}");
    for word in words {
        assert!(help.contains(word), "{name} --help lacks {word}: {help}");
    }
}

/// `scripts/NAME ARGS` is refused: exit status 2 and one line on stderr that contains `says`;
/// run with `path` as PATH when one is given.
fn assert_refuses(name: &str, args: &[&str], path: Option<&str>, says: &str) {
    let mut command = script_command(name);
    command.args(args);
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let out = command.output().expect("run script");
    assert_eq!(out.status.code(), Some(2), "{name} {args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{name} {args:?}: {err}");
    assert!(err.contains(says), "{name} {args:?}: {err}");
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
    let kept: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM pg_database WHERE datname = 'kept'",
        &[],
    );
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
    assert_documents(
        "chaos",
        &[
            "--workers",
            "--threads",
            "--lease-ms",
            "--creations",
            "--kill-every",
            "--restart-after",
            "--no-kill",
            "--timeout",
            "--binary",
            "--upgrade",
            "--previous-binary",
            "--upgrade-after",
            "--out",
            "Exit status",
        ],
    );
    // The upgrade drill's options are refused alone, and a previous release that is no commit.
    for (args, says) in [
        (&["--previous-binary", "/bin/true"][..], "--upgrade REV"),
        (
            &["--upgrade", "no-such-revision-x"][..],
            "no-such-revision-x is no commit",
        ),
        (
            &["--driver", "kubernetes", "--upgrade", "HEAD"][..],
            "--upgrade is an option of --driver docker",
        ),
    ] {
        assert_refuses("chaos", args, None, says);
    }
    assert_refuses("chaos", &["--kill-everything"], None, "--kill-everything");
}

// The soak documents its options, its verdicts and its exit statuses, and refuses a wrong
// argument in one line with exit status 2 before anything is built or started.
#[test]
fn the_soak_documents_its_options_and_refuses_a_wrong_one() {
    assert_documents(
        "soak",
        &[
            "--minutes",
            "--workers",
            "--kill-every",
            "--restart-after",
            "--sample-every",
            "--warmup",
            "--binary",
            "--kube-helper",
            "--out",
            "application_name",
            "slope per hour",
            "Exit status",
        ],
    );
    for (args, says) in [
        (
            &["--minutes", "0"][..],
            "--minutes must be a positive number",
        ),
        (&["--kill-everything"][..], "--kill-everything"),
    ] {
        assert_refuses("soak", args, None, says);
    }
}

// The benchmark's A/B documents its arguments and refuses a wrong one in one line with exit
// status 2 before anything is built or started: PATH holds git and nothing of cargo, so a
// build it began would fail otherwise, and no worktree is added.
#[test]
fn the_benchmark_a_b_documents_its_arguments_and_refuses_a_wrong_one() {
    assert_documents(
        "bench-ab",
        &[
            "REV_A REV_B",
            "--rounds",
            "--only paired --pairs 3",
            "target/bench-ab",
            "median ratio",
            "Exit status",
        ],
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let worktrees = || {
        let out = Command::new("git")
            .args(["worktree", "list", "--porcelain"])
            .current_dir(&root)
            .output()
            .expect("git worktree list");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let before = worktrees();
    for (args, says) in [
        (&["HEAD"][..], "give two revisions"),
        (
            &["HEAD", "no-such-revision-x"][..],
            "no-such-revision-x is no commit",
        ),
        (
            &["HEAD", "HEAD", "--rounds", "0"][..],
            "--rounds takes a whole number",
        ),
        (
            &["HEAD", "HEAD", "--kill-everything"][..],
            "--kill-everything",
        ),
    ] {
        assert_refuses("bench-ab", args, Some("/usr/local/bin:/usr/bin:/bin"), says);
    }
    assert_eq!(worktrees(), before, "a refused A/B added a worktree");
}

// The dev loop's scripts print their own usage on --help and start nothing: no cargo, no
// PostgreSQL (PATH holds neither).
#[test]
fn dev_and_test_print_their_usage_without_starting_anything() {
    for (name, first, flag) in [
        (
            "dev",
            "Runs the worker locally for development: a throwaway PostgreSQL (scripts/pg-start target/pg-dev,",
            "  scripts/dev --help      print this and exit",
        ),
        (
            "test",
            "Runs the whole test suite: starts a throwaway PostgreSQL (scripts/pg-start, cluster",
            "  scripts/test --help          print this and exit (nextest's own: cargo nextest run --help)",
        ),
    ] {
        let out = script_command(name)
            .arg("--help")
            .env("PATH", "/usr/bin:/bin")
            .output()
            .expect("run script");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            (out.status.code(), String::from_utf8_lossy(&out.stderr).as_ref()),
            (Some(0), ""),
            "{name}"
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines[0], first, "{stdout}");
        assert!(lines.contains(&flag), "{stdout}");
        assert!(!stdout.contains("set -euo"), "{stdout}");
    }
}

/// `scripts/dev ARGS` in `scratch` (without the build), its output into `log`: the child, once
/// ready.
fn start_dev(
    scratch: &crate::readme::Scratch,
    log: &std::path::Path,
    args: &[&str],
) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let out = std::fs::File::create(log).unwrap();
    let mut cmd = Command::new("scripts/dev");
    cmd.args(args)
        .current_dir(&scratch.checkout)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_else(|_| "/".into()))
        .env("OCC_DEV_SKIP_BUILD", "1")
        .env("OCC_DOCKER_SUBNET_POOL", "10.219.0.0/16:24")
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0);
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        cmd.env("DOCKER_HOST", host);
    }
    let child = cmd.spawn().expect("scripts/dev");
    let ready = Command::new("scripts/dev")
        .args(["--wait", &child.id().to_string()])
        .current_dir(&scratch.checkout)
        .status()
        .unwrap();
    assert!(
        ready.success(),
        "scripts/dev not ready:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    child
}

/// Signals `child` (a `scripts/dev`) and waits for it: its exit code.
fn stop_dev(mut child: std::process::Child, signal: i32) -> Option<i32> {
    // SAFETY: kill(2) on a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    crate::support::child_exit(&mut child, std::time::Duration::from_secs(60))
        .expect("scripts/dev did not stop")
        .code()
}

fn dev_env(scratch: &crate::readme::Scratch, name: &str) -> String {
    let env = std::fs::read_to_string(scratch.checkout.join("target/dev.env")).unwrap();
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("export {name}=")))
        .unwrap_or_else(|| panic!("{name} in {env}"))
        .to_string()
}

// The dev loop: the Installation (and so the Docker label) is the checkout's own; dev.env puts
// the binary on PATH and defines `occ`; Ctrl-C stops the worker, then PostgreSQL, and exits 0;
// the next start finds its data and the same health port.
#[test]
fn scripts_dev_is_per_checkout_and_stops_postgres_on_ctrl_c() {
    if !crate::docker::docker_available() {
        return;
    }
    use sha2::Digest;
    let mut scratch = crate::readme::scratch_checkout_for("dev");
    let hash = sha2::Sha256::digest(scratch.checkout.to_str().unwrap().as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    scratch.installation = format!("dev-{}", &hex[..8]);
    let log = scratch.base.join("dev.log");

    let dev = start_dev(&scratch, &log, &[]);
    assert_eq!(
        dev_env(&scratch, "OCC_DEV_INSTALLATION"),
        scratch.installation
    );
    let addr = dev_env(&scratch, "OCC_WORKER_HTTP_ADDR");
    let url = dev_env(&scratch, "OCC_DATABASE_URL");
    let helpers = Command::new("bash")
        .arg("-c")
        .arg("source target/dev.env && $occ admin identity create bob --actor admin >/dev/null && command -v occ-worker")
        .current_dir(&scratch.checkout)
        .output()
        .unwrap();
    assert!(
        helpers.status.success(),
        "{}",
        String::from_utf8_lossy(&helpers.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&helpers.stdout).trim(),
        scratch
            .checkout
            .join("target/debug/occ-worker")
            .to_str()
            .unwrap()
    );
    assert_eq!(stop_dev(dev, libc::SIGINT), Some(0));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("\"event\":\"worker.stopped\"")
            && said.ends_with("dev: stopping PostgreSQL (its data stays in target/pg-dev; the next scripts/dev starts it again)\n"),
        "{said}"
    );
    assert!(Client::connect(&url, NoTls).is_err(), "PostgreSQL stopped");

    let dev = start_dev(&scratch, &log, &[]);
    assert_eq!(
        dev_env(&scratch, "OCC_WORKER_HTTP_ADDR"),
        addr,
        "the same port"
    );
    let mut c = Client::connect(&dev_env(&scratch, "OCC_DATABASE_URL"), NoTls).unwrap();
    let kept: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.identities WHERE id = 'bob'",
        &[],
    );
    assert_eq!(kept, 1, "the dev database kept its data");
    drop(c);
    assert_eq!(stop_dev(dev, libc::SIGTERM), Some(0));

    // --reset starts afresh, naming the label of what it deletes.
    let dev = start_dev(&scratch, &log, &["--reset"]);
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.starts_with(&format!(
            "dev: reset: deleting the dev cluster and Docker resources labelled occ.installation={}\n",
            scratch.installation
        )),
        "{said}"
    );
    let mut c = Client::connect(&dev_env(&scratch, "OCC_DATABASE_URL"), NoTls).unwrap();
    let kept: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.identities WHERE id = 'bob'",
        &[],
    );
    assert_eq!(kept, 0, "afresh");
    drop(c);
    assert_eq!(stop_dev(dev, libc::SIGTERM), Some(0));
}

/// `scripts/dev ARGS` in `dir` with PATH and nothing else: (exit code, stderr).
fn dev_in(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("scripts/dev")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("OCC_DEV_SKIP_BUILD", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("scripts/dev");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// A mistyped argument starts nothing: one line naming it and exit status 2 (`--bogus` used to
// start a worker, `--wait` without a pid printed raw bash); `--wait` on a pid that never was a
// scripts/dev of this checkout says so at once instead of "exited before it was ready".
#[test]
fn scripts_dev_refuses_unknown_arguments_and_a_pid_it_never_started() {
    let scratch = crate::readme::scratch_checkout_for("devargs");
    for (args, said) in [
        (
            vec!["--bogus"],
            "dev: unknown argument --bogus (scripts/dev --help lists them)\n",
        ),
        (
            vec!["--reset", "now"],
            "dev: unknown argument now (scripts/dev --help lists them)\n",
        ),
        (
            vec!["--wait"],
            "dev: --wait needs the process id of a scripts/dev started in the background: scripts/dev & then scripts/dev --wait $!\n",
        ),
        (
            vec!["--wait", "soon"],
            "dev: --wait needs the process id of a scripts/dev started in the background: scripts/dev & then scripts/dev --wait $!\n",
        ),
    ] {
        assert_eq!(
            dev_in(&scratch.checkout, &args),
            (Some(2), said.to_string()),
            "{args:?}"
        );
    }
    assert!(
        !scratch.checkout.join("target/dev.lock").exists()
            && !scratch.checkout.join("target/dev.started").exists(),
        "a refused argument starts nothing"
    );

    // A pid that existed, but never as a scripts/dev here: it has exited by now.
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let pid = gone.id().to_string();
    assert_eq!(
        dev_in(&scratch.checkout, &["--wait", &pid]),
        (
            Some(1),
            format!(
                "dev: waiting for scripts/dev (pid {pid}) to answer /readyz (building and starting; at most 30 minutes)\n\
                 dev: no scripts/dev with pid {pid} started in this checkout: give the pid of `scripts/dev &` ($!)\n"
            )
        )
    );
}

// A second scripts/dev on the same checkout says which one runs (pid and address) and exits 1
// without touching it: dev.env stays the first one's, its worker stays ready and its
// PostgreSQL up (the second used to stop it on its way out). `--wait` on the refused one says
// it exited; dev.env is removed when the first one's worker stops.
#[test]
fn a_second_scripts_dev_names_the_running_one_and_leaves_it_alone() {
    if !crate::docker::docker_available() {
        return;
    }
    let scratch = crate::readme::scratch_checkout_for("dev2");
    let log = scratch.base.join("dev.log");
    // A port of its own (the one scripts/dev keeps for the next start): the other dev test
    // may hold the default one.
    std::fs::write(
        scratch.checkout.join("target/dev.port"),
        crate::support::free_port().to_string(),
    )
    .unwrap();
    let first = start_dev(&scratch, &log, &[]);
    let env_path = scratch.checkout.join("target/dev.env");
    let env_before = std::fs::read_to_string(&env_path).unwrap();
    let addr = dev_env(&scratch, "OCC_WORKER_HTTP_ADDR");
    let url = dev_env(&scratch, "OCC_DATABASE_URL");

    for args in [&[][..], &["--reset"][..]] {
        let second = Command::new("scripts/dev")
            .args(args)
            .current_dir(&scratch.checkout)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("OCC_DEV_SKIP_BUILD", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let second_pid = second.id().to_string();
        let out = second.wait_with_output().unwrap();
        assert_eq!(
            (out.status.code(), String::from_utf8_lossy(&out.stderr).as_ref()),
            (
                Some(1),
                format!(
                    "dev: scripts/dev already runs in this checkout (pid {}, http://{addr}): stop it first (kill {}), or source target/dev.env to use it\n",
                    first.id(),
                    first.id()
                )
                .as_str()
            ),
            "{args:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&env_path).unwrap(),
            env_before,
            "dev.env is still the first one's"
        );
        assert!(Client::connect(&url, NoTls).is_ok(), "PostgreSQL still up");
        assert_eq!(
            crate::support::http_exchange(&addr, b"GET /readyz HTTP/1.0\r\n\r\n"),
            Some(200),
            "the first worker is still ready"
        );
        let (code, said) = dev_in(&scratch.checkout, &["--wait", &second_pid]);
        assert_eq!(code, Some(1), "{said}");
        assert!(
            said.ends_with(&format!(
                "dev: scripts/dev (pid {second_pid}) exited before it was ready: its output above says why\n"
            )),
            "{said}"
        );
    }

    assert_eq!(stop_dev(first, libc::SIGTERM), Some(0));
    assert!(
        !env_path.exists(),
        "dev.env removed when its worker stopped"
    );
    assert!(Client::connect(&url, NoTls).is_err(), "PostgreSQL stopped");
}

// The suite's secret rule (issue text: no secret in any log): `scripts/canary-scan` fails on a
// planted canary in a captured log, plain or base64 in each alignment, naming the file and
// line with the canary masked, and passes on a clean directory, so the check in
// `scripts/test` can fail.
#[test]
fn the_canary_scan_fails_on_a_planted_canary_plain_or_base64_and_passes_a_clean_log() {
    use crate::support::{canary, holds_canary, CANARY_MARKER};
    use base64::Engine as _;
    let dir = std::env::temp_dir().join(format!("occ-canary-scan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("it")).unwrap();
    let dir_arg = dir.display().to_string();
    let clean = "{\"event\":\"worker.started\",\"computeDriverId\":\"docker\"}\nWARN kubernetes GET /api/v1/namespaces/{name}: 401\n";
    std::fs::write(dir.join("it/clean.log"), clean).unwrap();
    let (ok, stdout, stderr) = script("canary-scan", &[&dir_arg]);
    assert!(ok, "a clean directory passes: {stdout}{stderr}");
    assert!(!holds_canary(clean));

    let planted = canary("scan-test");
    let cases: Vec<(&str, String)> = vec![
        (
            "plain",
            format!("{{\"event\":\"x\",\"token\":\"{planted}\"}}"),
        ),
        (
            "upper",
            format!("Authorization: Bearer {}", planted.to_uppercase()),
        ),
        ("hex", planted.bytes().map(|b| format!("{b:02x}")).collect()),
    ]
    .into_iter()
    .chain((0..3).map(|shift| {
        // The canary at each byte offset modulo 3 of a base64-encoded Secret.
        let data = format!("{}{planted}", "k".repeat(shift));
        (
            "base64",
            format!(
                "data: {}",
                base64::engine::general_purpose::STANDARD.encode(data)
            ),
        )
    }))
    .collect();
    for (what, line) in cases {
        assert!(holds_canary(&line), "{what}: {line}");
        let file = dir.join("it/leak.log");
        std::fs::write(&file, format!("{clean}{line}\n")).unwrap();
        let (ok, _, stderr) = script("canary-scan", &[&dir_arg]);
        assert!(!ok, "{what}: a canary fails the scan");
        assert!(
            stderr.contains(&format!("{}:3:", file.display())),
            "{what}: names the file and line: {stderr}"
        );
        assert!(
            !holds_canary(&stderr) && !stderr.to_lowercase().contains(CANARY_MARKER),
            "{what}: the report masks the canary: {stderr}"
        );
    }
    let (ok, _, stderr) = script("canary-scan", &["/nonexistent/occ-test-logs"]);
    assert!(!ok && stderr.contains("does not exist"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

// scripts/test's closing block, from a JUnit report as nextest writes it: the counts (a
// failure counted and marked), and the ten slowest of twelve tests, slowest first, with their
// durations; without a report it still prints the wall time and says there is none.
#[test]
fn the_test_summary_names_the_ten_slowest_tests_from_the_junit_report() {
    let dir = std::env::temp_dir().join(format!("occ-test-summary-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cases: String = (1..=12)
        .map(|i| {
            let failure = if i == 7 {
                r#"<failure type="test failure">panicked</failure>"#
            } else {
                ""
            };
            format!(r#"<testcase name="m::t{i}" classname="occ-worker::it" time="{i}.300">{failure}</testcase>"#)
        })
        .collect();
    let report = dir.join("junit.xml");
    std::fs::write(
        &report,
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="12" failures="1" errors="0" time="95.5">
<testsuite name="occ-worker::it" tests="12" disabled="0" errors="0" failures="1">{cases}</testsuite>
</testsuites>"#
        ),
    )
    .unwrap();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 125.0;
    let summary = |path: &std::path::Path| {
        let out = Command::new("python3")
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/lib/test-summary"))
            .arg(format!("{started}"))
            .arg(path)
            .output()
            .expect("run scripts/lib/test-summary");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let printed = summary(&report);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[0], "== scripts/test summary", "{printed}");
    assert!(lines[1].starts_with("wall time 2 min 0"), "{printed}");
    assert!(
        lines[1].ends_with("(tests 1 min 36 s, the rest building and scanning); 12 tests: 11 passed, 1 failed, 0 skipped"),
        "{printed}"
    );
    assert_eq!(lines[2], "the ten slowest tests:");
    let slowest: Vec<String> = (3..=12)
        .rev()
        .map(|i| {
            let mark = if i == 7 { "  FAILED" } else { "" };
            format!("  {:>7} s  occ-worker::it m::t{i}{mark}", format!("{i}.3"))
        })
        .collect();
    assert_eq!(lines[3..], slowest, "{printed}");

    let printed = summary(&dir.join("missing.xml"));
    assert!(
        printed.contains("wall time 2 min 0") && printed.contains("no test report"),
        "{printed}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// scripts/test runs the tests with a temporary directory of the run's own, removed when the
// run ends, so no test leaves its kubeconfigs, installation files or sockets behind; the turn
// locks stay in the shared one. Run outside scripts/test (plain cargo), it says so and checks
// nothing more.
#[test]
fn scripts_test_gives_the_tests_a_temporary_directory_of_their_own() {
    let Some(shared) = std::env::var_os("OCC_TEST_SHARED_TMPDIR") else {
        eprintln!("not run by scripts/test (no OCC_TEST_SHARED_TMPDIR): nothing to check");
        return;
    };
    let own = std::env::temp_dir();
    assert_eq!(own.parent(), Some(std::path::Path::new(&shared)), "{own:?}");
    let name = own.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("occ-test-scratch."), "{name}");
    assert!(own.is_dir(), "{own:?}");
}
