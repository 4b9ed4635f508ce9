//! SPEC section 9: every operator command fails with one line a user can act on, and the exit
//! code the README promises (2: bad input or configuration; 1: refused or failed as things
//! stand). Each message is asserted verbatim; the operator reads list what psql used to.

use crate::support::{free_port, insert_namespace, TestDb};
use serde_json::{json, Value};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_occ-worker");

/// Runs `occ-worker ARGS` with exactly `url` as OCC_DATABASE_URL (or none): (exit, stdout, stderr).
pub fn run(url: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("OCC_DATABASE_URL")
        .env_remove("OCC_COMPUTE_DRIVER")
        .env("OCC_WORKER_DB_TIMEOUT_MS", "3000");
    if let Some(url) = url {
        cmd.env("OCC_DATABASE_URL", url);
    }
    let out = cmd.output().expect("run occ-worker");
    // Its diagnostics (stdout is the command's answer, not a log) for the canary scan.
    crate::support::log_stderr("cli", &out.stderr);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts the command fails with exactly `code` and the one line `message`.
pub fn refused(url: Option<&str>, args: &[&str], code: i32, message: &str) {
    let (got, _, stderr) = run(url, args);
    assert_eq!(
        (got, stderr.as_str()),
        (code, format!("occ-worker: {message}\n").as_str()),
        "occ-worker {args:?}"
    );
}

pub fn ok(db: &TestDb, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, stdout, stderr) = run(Some(&db.url), &all);
    assert_eq!(code, 0, "occ-worker {args:?}: {stderr}");
    serde_json::from_str(&stdout).expect("JSON output")
}

/// A bootstrapped database with the ready Namespace `team-b` (id and name).
fn team_b() -> TestDb {
    let db = TestDb::bootstrapped();
    insert_namespace(&mut db.client(), "team-b", "ready");
    db
}

fn with_db(url: &str, db: &str) -> String {
    format!("{}/{db}", url.rsplit_once('/').unwrap().0)
}

/// A bootstrapped database with the Namespace `team-c` created through the CLI (so its id is
/// generated, unlike its name) and marked ready: (database, Namespace id).
fn team_c() -> (TestDb, String) {
    let db = TestDb::bootstrapped();
    let ns = ok(
        &db,
        &["admin", "namespace", "create", "team-c", "--actor", "admin"],
    );
    let ns = ns["id"].as_str().unwrap().to_string();
    db.client()
        .execute(
            "UPDATE occ.namespaces_all SET status = 'ready' WHERE id = $1",
            &[&ns],
        )
        .unwrap();
    (db, ns)
}

// A deployment naming a Configuration or a Secret that does not exist names that one, never
// the Agent: it used to print "configuration writer (nope)".
#[test]
fn a_missing_configuration_or_secret_is_named_not_the_agent() {
    let (db, ns) = team_c();
    let url = Some(db.url.as_str());
    ok(
        &db,
        &[
            "admin", "agent", "create", "team-c", "writer", "--actor", "admin",
        ],
    );
    let deploy = crate::support::deploy_args(
        "team-c",
        "writer",
        "nope",
        &[
            "--harness-secret",
            "key",
            "--compute-id",
            "docker",
            "--actor",
            "admin",
        ],
    );
    refused(
        url,
        &deploy,
        1,
        &format!(
            "agent deploy refused: configuration nope in Namespace team-c ({ns}) does not exist"
        ),
    );
    let cfg = std::env::temp_dir().join(format!("occ-cfg-{}.json", std::process::id()));
    std::fs::write(&cfg, r#"{"model":"gpt"}"#).unwrap();
    ok(
        &db,
        &[
            "admin",
            "configuration",
            "put",
            "team-c",
            "cfg",
            "--file",
            cfg.to_str().unwrap(),
            "--actor",
            "admin",
        ],
    );
    std::fs::remove_file(&cfg).unwrap();
    let deploy = crate::support::deploy_args(
        "team-c",
        "writer",
        "cfg",
        &[
            "--harness-secret",
            "nokey",
            "--compute-id",
            "docker",
            "--actor",
            "admin",
        ],
    );
    refused(
        url,
        &deploy,
        1,
        &format!("agent deploy refused: secret nokey in Namespace team-c ({ns}) does not exist"),
    );
}

/// `run` with `env` set as well: (exit, stdout, stderr).
fn run_with(url: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("OCC_COMPUTE_DRIVER")
        .env_remove("OCC_KUBERNETES_CONFIG")
        .env("OCC_DATABASE_URL", url)
        .env("OCC_WORKER_DB_TIMEOUT_MS", "3000")
        .envs(env.iter().copied())
        .output()
        .expect("run occ-worker");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// What the driver can never do is refused at admission, not in the background: adopting a
// Kubernetes namespace on Docker (it used to leave a failed Namespace to delete), and on
// Kubernetes a Secret backend reference outside the Namespace's secretBackendRefPrefix (its
// deployment used to fail much later with SECRET_REFERENCE_OUTSIDE_NAMESPACE).
#[test]
fn what_the_driver_can_never_do_is_refused_at_admission() {
    let (db, ns) = team_c();
    let docker = [("OCC_COMPUTE_DRIVER", "docker")];
    let adopt = [
        "admin",
        "namespace",
        "create",
        "team-d",
        "--existing-namespace",
        "legacy",
        "--actor",
        "admin",
    ];
    assert_eq!(
        run_with(&db.url, &adopt, &docker),
        (
            2,
            String::new(),
            "occ-worker: namespace create refused: --existing-namespace legacy adopts a Kubernetes namespace, which the Docker Compute Driver (OCC_COMPUTE_DRIVER=docker) cannot (EXISTING_NAMESPACE_UNSUPPORTED): leave it out\n".into()
        )
    );
    let admitted: i64 = crate::support::scalar(
        &mut db.client(),
        "SELECT count(*) FROM occ.namespaces_all WHERE name = 'team-d'",
    );
    assert_eq!(admitted, 0, "nothing admitted");

    let dir = crate::kube_e2e::scratch("cli-secret-prefix");
    let driver = dir.join("driver.json");
    std::fs::write(&driver, crate::kube_e2e::DRIVER_FILE).unwrap();
    let kubernetes = [
        ("OCC_COMPUTE_DRIVER", "kubernetes"),
        ("OCC_KUBERNETES_CONFIG", driver.to_str().unwrap()),
    ];
    let k8s = crate::kube_e2e::k8s_namespace(&ns);
    let create = |backend_ref: &str| {
        run_with(
            &db.url,
            &[
                "admin",
                "secret",
                "create",
                "team-c",
                "key",
                "--backend-ref",
                backend_ref,
                "--actor",
                "admin",
            ],
            &kubernetes,
        )
    };
    assert_eq!(
        create("team-c/openai/api-key"),
        (
            2,
            String::new(),
            format!("occ-worker: secret create refused: --backend-ref team-c/openai/api-key is outside the Namespace's Kubernetes namespace: it must start with {k8s}/ (secretBackendRefPrefix in admin namespace show; SECRET_REFERENCE_OUTSIDE_NAMESPACE)\n")
        )
    );
    let inside = format!("{k8s}/openai/api-key");
    let (code, _, stderr) = create(&inside);
    assert_eq!(code, 0, "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

// Siblings agree: `audit --since 15m` takes an age as `work list --since` does (it was
// refused); an unknown `--agent` is an error like an unknown Namespace (it was silently
// empty); `--file -` reads standard input (it was "No such file"), and a UTF-8 byte order mark
// is skipped (it read "expected value at line 1 column 1").
#[test]
fn sibling_commands_agree_on_ages_unknown_agents_stdin_and_a_byte_order_mark() {
    let (db, _) = team_c();
    let url = Some(db.url.as_str());
    let recent = ok(&db, &["admin", "audit", "--since", "15m"]);
    assert!(
        recent.as_array().is_some_and(|events| events
            .iter()
            .any(|e| e["action"] == "openclaw.namespaces.create")),
        "{recent}"
    );
    // An hour ago (the trail is append-only: its trigger is bypassed for this one session).
    db.client()
        .batch_execute(
            "SET session_replication_role = replica;
             UPDATE occ.audit_events SET occurred_at = occurred_at - interval '1 hour'",
        )
        .unwrap();
    assert_eq!(ok(&db, &["admin", "audit", "--since", "15m"]), json!([]));
    refused(
        url,
        &["admin", "audit", "--since", "15 minutes"],
        2,
        "--since must be an RFC 3339 time such as 2026-01-31T12:00:00Z or an age such as 90s, 15m, 2h or 7d, got \"15 minutes\"",
    );

    refused(
        url,
        &["admin", "work", "list", "--agent", "ghost"],
        1,
        "work list refused: no Agent ghost in any Namespace has that id or name (a deleted Agent's work went with it; admin agent list NAMESPACE)",
    );
    ok(
        &db,
        &[
            "admin", "agent", "create", "team-c", "writer", "--actor", "admin",
        ],
    );
    assert_eq!(
        ok(&db, &["admin", "work", "list", "--agent", "writer"]),
        json!([])
    );
    refused(
        url,
        &["admin", "work", "list", "--namespace", "team-c", "--agent", "ghost"],
        1,
        "work list refused: no Agent ghost in that Namespace has that id or name (a deleted Agent's work went with it; admin agent list NAMESPACE)",
    );

    let put = |id: &str, input: &[u8]| {
        use std::io::Write;
        let mut child = Command::new(BIN)
            .args([
                "admin",
                "configuration",
                "put",
                "team-c",
                id,
                "--file",
                "-",
                "--actor",
                "admin",
                "--json",
            ])
            .env("OCC_DATABASE_URL", &db.url)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(
        put("from-stdin", br#"{"model":"gpt"}"#),
        (Some(0), String::new())
    );
    assert_eq!(
        put("with-bom", b"\xEF\xBB\xBF{\"model\":\"gpt\"}"),
        (Some(0), String::new())
    );
    assert_eq!(
        put("not-json", b"model: gpt"),
        (
            Some(2),
            "occ-worker: --file - (standard input) is not JSON: expected value at line 1 column 1 (a Configuration is one JSON object)\n".into()
        )
    );
    let shown = ok(
        &db,
        &["admin", "configuration", "show", "team-c", "with-bom"],
    );
    assert_eq!(shown["document"], json!({"model": "gpt"}), "{shown}");
}

// O: constraint violations name the argument and its rule (exit 2); duplicates name the
// thing and where it lives (exit 1). No constraint name or server text reaches the user.
#[test]
fn admission_refusals_name_the_argument_and_the_rule() {
    let db = team_b();
    let url = Some(db.url.as_str());
    refused(
        url,
        &["admin", "secret", "create", "team-b", "key", "--backend-ref", "openai-key", "--actor", "admin"],
        2,
        "secret create refused: --backend-ref must look like NAMESPACE/NAME/KEY (a Kubernetes namespace and Secret name, then the key), got \"openai-key\"",
    );
    ok(
        &db,
        &[
            "admin",
            "secret",
            "create",
            "team-b",
            "key",
            "--backend-ref",
            "team-b/openai/api-key",
            "--actor",
            "admin",
        ],
    );
    refused(
        url,
        &[
            "admin",
            "secret",
            "create",
            "team-b",
            "key",
            "--backend-ref",
            "team-b/openai/api-key",
            "--actor",
            "admin",
        ],
        1,
        "secret create refused: Secret key already exists in team-b",
    );
    refused(
        url,
        &["admin", "agent", "create", "team-b", "Helper", "--actor", "admin"],
        2,
        "agent create refused: NAME must be 1 to 63 lowercase letters, digits, - and _, starting with a letter or digit, got \"Helper\"",
    );
    refused(
        url,
        &[
            "admin",
            "namespace",
            "create",
            "team-c",
            "--actor",
            "nobody",
        ],
        1,
        "namespace create refused: --actor nobody is not an identity (admin identity list)",
    );
    ok(
        &db,
        &["admin", "identity", "create", "bob", "--actor", "admin"],
    );
    refused(
        url,
        &["admin", "secret", "create", "team-b", "k2", "--backend-ref", "a/b/c", "--actor", "bob"],
        1,
        "secret create refused: bob may not create secret: NO_MATCHING_BINDING (needs create secret on secret k2 in Namespace team-b)",
    );
    refused(
        url,
        &["admin", "namespace", "delete", "team-b", "--actor", "bob"],
        1,
        "namespace delete refused: bob may not delete Namespace team-b: NO_MATCHING_BINDING (needs delete namespace on Namespace team-b)",
    );
}

// O: a Configuration file is one JSON object of at most 1 MiB; anything else is bad input.
#[test]
fn configuration_files_are_limited_to_one_mebibyte_of_json_object() {
    let db = team_b();
    let dir = std::env::temp_dir().join(format!("occ-cli-{}", db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.json");
    std::fs::write(&big, format!("{{\"pad\":\"{}\"}}", "x".repeat(1024 * 1024))).unwrap();
    let list = dir.join("list.json");
    std::fs::write(&list, "[1]").unwrap();
    let exact = dir.join("exact.json");
    let body = "{\"pad\":\"\"}";
    std::fs::write(
        &exact,
        format!("{{\"pad\":\"{}\"}}", "x".repeat(1024 * 1024 - body.len())),
    )
    .unwrap();
    let put = |file: &std::path::Path| {
        vec![
            "admin".to_string(),
            "configuration".into(),
            "put".into(),
            "team-b".into(),
            "cfg".into(),
            "--file".into(),
            file.display().to_string(),
            "--actor".into(),
            "admin".into(),
        ]
    };
    let args = put(&big);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(
        Some(&db.url),
        &args,
        2,
        &format!(
            "--file {} is larger than 1 MiB (1048576 bytes), the limit for a Configuration",
            big.display()
        ),
    );
    let args = put(&list);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(
        Some(&db.url),
        &args,
        2,
        &format!(
            "--file {} holds JSON but not an object: a Configuration is one JSON object",
            list.display()
        ),
    );
    let args = put(&exact);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(
        ok(&db, &args)["generation"],
        json!(1),
        "exactly 1 MiB is accepted"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// O: a Namespace nobody ever created is an error for every command that names one.
#[test]
fn unknown_namespaces_are_errors_everywhere() {
    let db = team_b();
    let url = Some(db.url.as_str());
    for (args, message) in [
        (vec!["admin", "audit", "--namespace", "nope"], "audit refused: no Namespace nope (no live or deleted Namespace has that id or name)"),
        (vec!["admin", "work", "list", "--namespace", "nope"], "work list refused: no Namespace nope (no live or deleted Namespace has that id or name)"),
        (vec!["admin", "namespace", "show", "nope"], "namespace show refused: no Namespace nope"),
        (vec!["admin", "agent", "list", "nope"], "agent list refused: no Namespace nope"),
        (vec!["admin", "secret", "list", "nope"], "secret list refused: no Namespace nope"),
        (vec!["admin", "configuration", "list", "nope"], "configuration list refused: no Namespace nope"),
        (vec!["admin", "grant", "list", "--scope", "namespace:nope"], "grant list refused: no Namespace nope"),
    ] {
        refused(url, &args, 1, message);
    }
    assert_eq!(
        ok(&db, &["admin", "audit", "--namespace", "team-b"]),
        json!([])
    );
}

// W8, O: a bad URL is configuration (exit 2) naming the variable; a missing database says so
// at once; an unreachable server is named by address, never with the password.
#[test]
fn database_trouble_names_the_address_and_the_variable() {
    let db = TestDb::bootstrapped();
    let missing = with_db(&db.url, "occ_no_such_database");
    let server = db
        .url
        .split('@')
        .nth(1)
        .unwrap()
        .rsplit_once('/')
        .unwrap()
        .0
        .to_string();
    let port = free_port();
    let closed = format!(
        "postgres://alice:{}@127.0.0.1:{port}/occ",
        crate::support::canary("db-password")
    );
    refused(
        Some("garbage"),
        &["admin", "namespace", "list"],
        2,
        "invalid configuration: OCC_DATABASE_URL is not a PostgreSQL connection string (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)",
    );
    refused(
        None,
        &["admin", "namespace", "list", "--database-url", "garbage"],
        2,
        "invalid configuration: --database-url is not a PostgreSQL connection string (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)",
    );
    refused(
        None,
        &["admin", "namespace", "list"],
        2,
        "invalid configuration: OCC_DATABASE_URL is required (or --database-url)",
    );
    let started = std::time::Instant::now();
    refused(
        Some(&missing),
        &["admin", "namespace", "list"],
        2,
        &format!("database occ_no_such_database does not exist on {server} (OCC_DATABASE_URL): create it or correct the URL"),
    );
    refused(
        Some(&closed),
        &["admin", "namespace", "list"],
        1,
        &format!("database unreachable at alice@127.0.0.1:{port}/occ (OCC_DATABASE_URL): error connecting to server: Connection refused (os error 111)"),
    );
    // The worker's start-up checks say the same, at once, with the exit code of the kind.
    let (code, _, stderr) = {
        let out = Command::new(BIN)
            .args(["check"])
            .env("OCC_DATABASE_URL", &missing)
            .env("OCC_COMPUTE_DRIVER", "docker")
            .output()
            .unwrap();
        (
            out.status.code(),
            (),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(
        (code, stderr.as_str()),
        (
            Some(2),
            format!("occ-worker: database occ_no_such_database does not exist on {server} (OCC_DATABASE_URL): create it or correct the URL\n").as_str()
        )
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let out = Command::new(BIN)
        .args(["check"])
        .env("OCC_DATABASE_URL", "garbage")
        .env("OCC_COMPUTE_DRIVER", "docker")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

// O: identities, groups, grants, Agents, Secrets and Configurations are readable without
// psql, as JSON and as a table.
#[test]
fn operator_reads_list_and_show_every_kind() {
    let db = team_b();
    ok(
        &db,
        &["admin", "identity", "create", "bob", "--actor", "admin"],
    );
    ok(
        &db,
        &["admin", "group", "create", "ops", "--actor", "admin"],
    );
    ok(
        &db,
        &[
            "admin",
            "group",
            "add-member",
            "ops",
            "bob",
            "--actor",
            "admin",
        ],
    );
    ok(
        &db,
        &[
            "admin",
            "grant",
            "group:ops",
            "viewer",
            "--scope",
            "namespace:team-b",
            "--actor",
            "admin",
        ],
    );
    ok(
        &db,
        &[
            "admin",
            "secret",
            "create",
            "team-b",
            "key",
            "--backend-ref",
            "team-b/openai/api-key",
            "--actor",
            "admin",
        ],
    );
    let cfg = std::env::temp_dir().join(format!("occ-cli-cfg-{}", db.name));
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
    let agent = ok(
        &db,
        &[
            "admin", "agent", "create", "team-b", "helper", "--actor", "admin",
        ],
    );

    let ids: Vec<Value> = ok(&db, &["admin", "identity", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            json!("admin"),
            json!("bob"),
            agent["servicePrincipalId"].clone()
        ]
    );
    let bob = ok(&db, &["admin", "identity", "show", "bob"]);
    assert_eq!(bob["groups"], json!(["ops"]));
    assert_eq!(bob["bindings"][0]["via"], json!("group:ops"));
    assert_eq!(bob["bindings"][0]["scope"], json!("namespace:team-b"));
    assert_eq!(
        ok(&db, &["admin", "group", "list"])[0]["members"],
        json!(["bob"])
    );
    assert_eq!(
        ok(&db, &["admin", "group", "show", "ops"])["bindings"][0]["role"],
        json!("viewer")
    );
    let grants = ok(&db, &["admin", "grant", "list", "--principal", "group:ops"]);
    assert_eq!(grants.as_array().unwrap().len(), 1);
    assert_eq!(grants[0]["scope"], json!("namespace:team-b"));
    assert_eq!(
        ok(&db, &["admin", "grant", "list", "--scope", "installation"])[0]["principal"],
        json!("admin")
    );
    assert_eq!(
        ok(&db, &["admin", "agent", "list", "team-b"])[0]["name"],
        json!("helper")
    );
    assert_eq!(
        ok(&db, &["admin", "secret", "list", "team-b"])[0]["backendRef"],
        json!("team-b/openai/api-key")
    );
    assert_eq!(
        ok(&db, &["admin", "configuration", "list", "team-b"])[0]["generation"],
        json!(1)
    );
    assert_eq!(
        ok(&db, &["admin", "configuration", "show", "team-b", "cfg"])["document"],
        json!({"model": "gpt"})
    );

    let (code, table, _) = run(Some(&db.url), &["admin", "secret", "list", "team-b"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "ID   BACKEND REF            CREATED BY  CREATED");
    assert!(
        lines[1].starts_with("key  team-b/openai/api-key  admin       20"),
        "{table}"
    );
    let (_, empty, _) = run(
        Some(&db.url),
        &["admin", "agent", "list", "team-b", "--json"],
    );
    assert!(empty.contains("helper"));
    refused(
        Some(&db.url),
        &["admin", "identity", "show", "zed"],
        1,
        "identity show refused: no identity zed",
    );
    refused(
        Some(&db.url),
        &["admin", "group", "show", "zed"],
        1,
        "group show refused: no group zed",
    );
    refused(
        Some(&db.url),
        &["admin", "configuration", "show", "team-b", "zed"],
        1,
        "configuration show refused: no Configuration zed in Namespace team-b",
    );
    refused(
        Some(&db.url),
        &["admin", "grant", "list", "--principal", "zed"],
        1,
        "grant list refused: no identity zed",
    );
}

// O: the built-in roles and what each grants are readable without psql: every action of a
// role on every resource kind it lists, as JSON (camelCase) and as an aligned table.
#[test]
fn role_list_shows_what_each_built_in_role_grants() {
    let db = TestDb::bootstrapped();
    let roles = ok(&db, &["admin", "role", "list"]);
    let everything = [
        "installation",
        "namespace",
        "agent",
        "configuration",
        "secret",
        "service_account",
        "credential_source",
    ];
    assert_eq!(
        roles,
        json!([
            {"id": "installation-admin", "builtin": true,
             "actions": ["create", "delete", "administer", "operate", "deploy", "read"],
             "resourceKinds": everything},
            {"id": "namespace-admin", "builtin": true,
             "actions": ["create", "delete", "administer", "operate", "deploy", "read"],
             "resourceKinds": everything[1..]},
            {"id": "agent-operator", "builtin": true,
             "actions": ["operate", "deploy", "read"],
             "resourceKinds": ["agent", "configuration", "secret", "credential_source"]},
            {"id": "viewer", "builtin": true,
             "actions": ["read"],
             "resourceKinds": everything},
        ])
    );
    let (code, table, stderr) = run(Some(&db.url), &["admin", "role", "list"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        table.lines().collect::<Vec<_>>(),
        [
            "ROLE                ACTIONS                                       ON RESOURCE KINDS",
            "installation-admin  create,delete,administer,operate,deploy,read  installation,namespace,agent,configuration,secret,service_account,credential_source",
            "namespace-admin     create,delete,administer,operate,deploy,read  namespace,agent,configuration,secret,service_account,credential_source",
            "agent-operator      operate,deploy,read                           agent,configuration,secret,credential_source",
            "viewer              read                                          installation,namespace,agent,configuration,secret,service_account,credential_source",
        ]
    );
}

// O: completions and the man page come from the binary alone, with no database.
#[test]
fn completions_and_the_man_page_need_no_database() {
    let (code, script, stderr) = run(None, &["completions", "bash"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(
        script.contains("occ-worker") && script.contains("bootstrap"),
        "{script}"
    );
    let (code, page, stderr) = run(None, &["man"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(page.contains("\n.TH occ-worker 1 "), "{page}");
    let (code, _, stderr) = run(None, &["completions", "tcsh"]);
    assert_eq!(code, 2, "{stderr}");
}

// The pool follows from the concurrency (2 x OCC_WORKER_CONCURRENCY + 3
// pooled, 1 listener); a worker the server's max_connections can never carry is refused at
// start-up, before any pool connection, with one line naming both numbers (exit 2).
#[test]
fn a_concurrency_max_connections_cannot_carry_is_refused_naming_both_numbers() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    let setting = |c: &mut postgres::Client, name: &str| -> i64 {
        c.query_one("SELECT current_setting($1)::bigint", &[&name])
            .unwrap()
            .get(0)
    };
    let max = setting(&mut c, "max_connections");
    let reserved = setting(&mut c, "superuser_reserved_connections");
    // The smallest concurrency whose budget exceeds what the server admits.
    let concurrency = (max - reserved - 4) / 2 + 1;
    assert!((1..=1024).contains(&concurrency), "max_connections {max}");
    let needs = 2 * concurrency + 4;
    let check = |concurrency: i64| {
        let out = Command::new(BIN)
            .arg("check")
            .env("OCC_DATABASE_URL", &db.url)
            .env("OCC_COMPUTE_DRIVER", "docker")
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .env("OCC_WORKER_DB_TIMEOUT_MS", "3000")
            .env("OCC_WORKER_CONCURRENCY", concurrency.to_string())
            .output()
            .expect("run occ-worker");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = check(concurrency);
    assert_eq!(
        (code, stderr),
        (
            Some(2),
            format!(
                "occ-worker: invalid configuration: OCC_WORKER_CONCURRENCY={concurrency} needs \
                 {needs} database connections (2 x {concurrency} + 3 pooled, 1 listener) but the \
                 server admits {} (max_connections {max} less {reserved} reserved): lower \
                 OCC_WORKER_CONCURRENCY or raise max_connections\n",
                max - reserved
            )
        )
    );
    // One worker thread fewer fits: start-up goes past the budget to the next check (here the
    // missing Docker socket), never to the budget line.
    let (code, stderr) = check(concurrency - 1);
    assert_ne!(code, Some(0));
    assert!(
        !stderr.contains("max_connections") && stderr.contains("DOCKER_HOST"),
        "{stderr}"
    );
}

// M1, M4: backends and service accounts through the CLI, and a managed-account deployment
// admitted or refused with one line.
#[test]
fn managed_accounts_are_configured_bound_and_deployed_from_the_cli() {
    let db = team_b();
    let url = Some(db.url.as_str());
    let (created, shown) = managed_account_through_the_cli(&db);

    // An operator who may deploy the Agent and read the Configuration, but not the account.
    managed_deployment_operator(&db);
    let deploy = |actor: &'static str| -> Vec<&'static str> {
        let more = [
            "--actor",
            actor,
            "--service-account",
            "acct",
            "--compute-id",
            "docker",
        ];
        crate::support::deploy_args("team-b", "helper", "cfg", &more)
    };
    refused(
        url,
        &deploy("bob"),
        1,
        "agent deploy refused: bob may not read service_account: NO_MATCHING_BINDING (needs read service_account on service_account acct in Namespace team-b)",
    );
    ok(
        &db,
        &[
            "admin",
            "grant",
            "bob",
            "viewer",
            "--scope",
            "service_account:team-b/acct",
            "--actor",
            "admin",
        ],
    );
    let admitted = ok(&db, &deploy("bob"));
    assert_eq!(admitted["revision"], json!(1));
    let auth: Value = db
        .client()
        .query_one(
            "SELECT harness_auth FROM occ.agent_revisions WHERE id = $1",
            &[&admitted["revisionId"].as_str().unwrap()],
        )
        .unwrap()
        .get(0);
    assert_eq!(auth["credential"], created["credential"]);
    assert_eq!(auth["backendBinding"], shown["backendBinding"]);

    // The binding fails validation once its backend is removed.
    ok(
        &db,
        &["admin", "backend", "remove", "b1", "--actor", "admin"],
    );
    refused(
        url,
        &deploy("bob"),
        1,
        "agent deploy refused: service account team-b/acct has no valid backend binding (bind it to a configured chatgpt backend)",
    );
    // Exactly one harness source.
    let mut both = deploy("admin");
    both.extend(["--harness-secret", "key"]);
    refused(
        url,
        &both,
        2,
        "--harness-secret and --service-account are mutually exclusive: give one of them",
    );
}

/// M1: the chatgpt backend `b1` and the service account `team-b/acct` bound to it, through the
/// CLI, with its refusals on the way; the account as created and as shown.
fn managed_account_through_the_cli(db: &TestDb) -> (Value, Value) {
    let url = Some(db.url.as_str());
    let added = ok(
        db,
        &[
            "admin", "backend", "add", "b1", "--type", "chatgpt", "--actor", "admin",
        ],
    );
    assert_eq!(
        added,
        json!({"id": "b1", "type": "chatgpt", "created": true})
    );
    let backends = ok(db, &["admin", "backend", "list"]);
    assert_eq!(
        (
            backends.as_array().unwrap().len(),
            &backends[0]["id"],
            &backends[0]["type"]
        ),
        (1, &json!("b1"), &json!("chatgpt"))
    );
    refused(
        url,
        &["admin", "service-account", "create", "team-b", "acct", "--access-token", "token", "--actor", "admin"],
        2,
        "service-account create refused: invalid --access-token token: must be SECRET_NAME/KEY (a Kubernetes Secret name in the Agent's namespace, then its key)",
    );
    let created = ok(
        db,
        &[
            "admin",
            "service-account",
            "create",
            "team-b",
            "acct",
            "--access-token",
            "chatgpt/token",
            "--actor",
            "admin",
        ],
    );
    assert_eq!(
        created["credential"],
        json!({"kind": "access_token", "secretRef": {"name": "chatgpt", "key": "token"}})
    );
    assert_eq!(created["backendBinding"], Value::Null);
    refused(
        url,
        &["admin", "service-account", "bind", "team-b", "acct", "--backend", "b2", "--driver", "d1", "--workspace", "ws-1", "--actor", "admin"],
        1,
        "service-account bind refused: backend b2 is not a configured chatgpt backend (admin backend list)",
    );
    refused(
        url,
        &["admin", "service-account", "bind", "team-b", "acct", "--backend", "b1", "--driver", "d1", "--workspace", "ws 1", "--actor", "admin"],
        2,
        "service-account bind refused: --workspace must be 1 to 128 letters, digits, ., _, : and -, starting with a letter or digit, got \"ws 1\"",
    );
    ok(
        db,
        &[
            "admin",
            "service-account",
            "bind",
            "team-b",
            "acct",
            "--backend",
            "b1",
            "--driver",
            "d1",
            "--workspace",
            "ws-1",
            "--actor",
            "admin",
        ],
    );
    let shown = ok(db, &["admin", "service-account", "show", "team-b", "acct"]);
    assert_eq!(
        shown["backendBinding"],
        json!({"backendId": "b1", "driverId": "d1", "workspaceId": "ws-1", "credentialIssued": true})
    );
    assert_eq!(
        ok(db, &["admin", "service-account", "list", "team-b"])[0]["id"],
        json!("acct")
    );

    (created, shown)
}

/// The Configuration `cfg` and the Agent `helper` in `team-b`, and the operator `bob`, who may
/// deploy the Agent and read the Configuration, but not the account.
fn managed_deployment_operator(db: &TestDb) {
    let cfg = std::env::temp_dir().join(format!("occ-cli-managed-{}", db.name));
    std::fs::write(&cfg, r#"{"model":"gpt"}"#).unwrap();
    ok(
        db,
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
        db,
        &[
            "admin", "agent", "create", "team-b", "helper", "--actor", "admin",
        ],
    );
    ok(
        db,
        &["admin", "identity", "create", "bob", "--actor", "admin"],
    );
    ok(
        db,
        &[
            "admin",
            "grant",
            "bob",
            "agent-operator",
            "--scope",
            "namespace:team-b",
            "--actor",
            "admin",
        ],
    );
}

// Seed000:11, 25, 44: with OCC_WORKER_MODE=production the CLI admits dedicated Codex and
// embedded OpenClaw only; any other pair is refused before anything is written (exit 2).
#[test]
fn production_admits_dedicated_codex_and_embedded_openclaw_only() {
    let db = team_b();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "admin",
        "agent",
        "deploy",
        "team-b",
        "helper",
        "--actor",
        "admin",
        "--configuration",
        "cfg",
        "--harness",
        "codex",
        "--mode",
        "embedded",
        "--harness-secret",
        "key",
        "--compute-id",
        "kubernetes",
    ])
    .env("OCC_DATABASE_URL", &db.url)
    .env("OCC_WORKER_MODE", "production")
    .env("OCC_WORKER_DB_TIMEOUT_MS", "3000");
    let out = cmd.output().expect("run occ-worker");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "occ-worker: --harness codex --mode embedded is refused in production (OCC_WORKER_MODE=production): production runs --harness codex --mode dedicated and --harness openclaw --mode embedded only\n"
    );
    let revisions: i64 =
        crate::support::scalar(&mut db.client(), "SELECT count(*) FROM occ.agent_revisions");
    assert_eq!(revisions, 0);
}

// O: a refusal speaks the user's words: the names they typed next to the ids the database
// resolved, the actor that is no identity, the roles that exist, a long input cut with its
// length, and flags that exclude each other named together. Each line is exact.
#[test]
fn refusals_are_in_the_users_words() {
    let db = TestDb::bootstrapped();
    let url = Some(db.url.as_str());
    let ns = ok(
        &db,
        &["admin", "namespace", "create", "team-c", "--actor", "admin"],
    );
    let ns = ns["id"].as_str().unwrap().to_string();
    db.client()
        .execute(
            "UPDATE occ.namespaces_all SET status = 'ready' WHERE id = $1",
            &[&ns],
        )
        .unwrap();
    refused(
        url,
        &["admin", "agent", "show", "team-c", "nope"],
        1,
        &format!("agent show refused: agent nope in Namespace team-c ({ns}) does not exist"),
    );
    let agent = ok(
        &db,
        &[
            "admin", "agent", "create", "team-c", "helper", "--actor", "admin",
        ],
    );
    let agent = agent["id"].as_str().unwrap().to_string();
    ok(
        &db,
        &[
            "admin", "agent", "delete", "team-c", "helper", "--actor", "admin",
        ],
    );
    refused(
        url,
        &["admin", "agent", "delete", "team-c", "helper", "--actor", "admin"],
        1,
        &format!("agent delete refused: agent helper ({agent}) in Namespace team-c ({ns}) is being deleted"),
    );
    refused(
        url,
        &["admin", "namespace", "create", "team-d", "--actor", "ghost"],
        1,
        "namespace create refused: --actor ghost is not an identity (admin identity list)",
    );
    refused(
        url,
        &[
            "admin", "agent", "create", "team-c", "other", "--actor", "ghost",
        ],
        1,
        "agent create refused: --actor ghost is not an identity (admin identity list)",
    );
    refused(
        url,
        &["admin", "grant", "admin", "superuser", "--scope", "installation", "--actor", "admin"],
        2,
        "grant refused: no role superuser; the roles are installation-admin, namespace-admin, agent-operator, viewer (admin role list)",
    );
    let long = "a".repeat(100_000);
    let head = "a".repeat(32);
    refused(
        url,
        &["admin", "namespace", "show", &long],
        1,
        &format!("namespace show refused: no Namespace {head}… (100000 bytes)"),
    );
    refused(
        url,
        &["admin", "agent", "create", "team-c", &long, "--actor", "admin"],
        2,
        &format!("agent create refused: NAME must be 1 to 63 lowercase letters, digits, - and _, starting with a letter or digit, got \"{head}…\" (100000 bytes)"),
    );
    let deploy = crate::support::deploy_args("team-c", "helper", "cfg", &["--actor", "admin"]);
    let mut both = deploy.to_vec();
    both.extend(["--harness-secret", "key", "--service-account", "acct"]);
    refused(
        url,
        &both,
        2,
        "--harness-secret and --service-account are mutually exclusive: give one of them",
    );
    // Neither: clap's usage, where --database-url is optional even when OCC_DATABASE_URL set it.
    let (code, _, stderr) = run(url, &deploy);
    assert_eq!(code, 2);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "error: the following required arguments were not provided:",
            "  <--harness-secret <SECRET>|--service-account <ACCOUNT>|--credential-source <ID>|--runtime-auth>",
            "",
            "Usage: occ-worker admin agent deploy --actor <ACTOR> --configuration <CONFIGURATION> --harness <HARNESS> --mode <MODE> [--database-url <URL>] <--harness-secret <SECRET>|--service-account <ACCOUNT>|--credential-source <ID>|--runtime-auth> <NAMESPACE> <AGENT>",
            "",
            "For more information, try '--help'.",
        ]
    );
    let (_, help, _) = run(None, &["admin", "namespace", "list", "--help"]);
    assert!(
        help.contains("--database-url <URL>  PostgreSQL connection string; optional when OCC_DATABASE_URL is set [env: OCC_DATABASE_URL]"),
        "{help}"
    );
}

// SPEC W8: before the first claim the persisted IAM state is loaded and validated; a row the
// reader cannot decode stops start-up (run and check) in one line naming the row.
#[test]
fn w8_an_undecodable_iam_row_stops_start_up_naming_it() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    for statement in [
        "SELECT occ.identity_create('admin', 'robbie')",
        "ALTER TABLE occ.identities DROP CONSTRAINT identities_kind_check",
        "ALTER TABLE occ.identities DROP CONSTRAINT identities_check",
        "UPDATE occ.identities SET kind = 'robot' WHERE id = 'robbie'",
    ] {
        c.batch_execute(statement).unwrap();
    }
    let env = [
        ("OCC_COMPUTE_DRIVER", "docker"),
        ("DOCKER_HOST", "unix:///nonexistent/docker.sock"),
    ];
    for command in ["check", "run"] {
        let (code, _, stderr) = run_with(&db.url, &[command], &env);
        assert_eq!(code, 1, "{command}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{command}: {stderr}");
        assert!(
            stderr.starts_with(
                "occ-worker: the persisted IAM state is invalid: corrupt data: occ.identities row \"robbie\" does not decode: "
            ),
            "{command}: {stderr}"
        );
    }
}

// Q4, W7 (V29): `work list --state claimed` and `work show` name the worker process holding
// each claim, as its `worker.started` line announces it (id, host, pid), and since when; for
// the idle claim and for the claim a publication makes in its own transaction alike. The
// claim's end (here, a release as the worker stops) clears it.
#[test]
fn a_claimed_work_names_the_worker_process_holding_it_and_since_when() {
    use crate::support::{wait_value, worker_env, WorkerProcess};
    use std::time::Duration;
    let db = team_b();
    let mut c = db.client();
    occ_worker::reconcile::probe::Probe::setup(&mut c).unwrap();
    // Two works in one lane: the second is claimed by the publication of the first.
    c.batch_execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
         VALUES ('namespace:team-b:ensure', 'team-b', 'ready', 'admin'),
                ('namespace:team-b:delete', 'team-b', 'deleted', 'admin')",
    )
    .unwrap();
    let mut env = worker_env(&db.url);
    env.push(("OCC_TEST_PROBE_HOLD_MS", "5000".into()));
    env.push(("OCC_WORKER_SHUTDOWN_GRACE_MS", "100".into()));
    let worker = WorkerProcess::start("probe", &env);
    let started = wait_value("worker.started", Duration::from_secs(20), || {
        worker
            .events()
            .into_iter()
            .find(|e| e["event"] == "worker.started")
    });
    assert_eq!(started["pid"], json!(worker.pid()), "{started}");
    let expected = json!({
        "workerId": started["workerId"],
        "host": started["host"],
        "pid": worker.pid(),
    });
    assert!(
        started["workerId"]
            .as_str()
            .is_some_and(|id| id.len() == 36)
            && started["host"].as_str().is_some_and(|h| !h.is_empty()),
        "{started}"
    );
    for key in ["namespace:team-b:ensure", "namespace:team-b:delete"] {
        let row = wait_value(&format!("{key} claimed"), Duration::from_secs(20), || {
            ok(&db, &["admin", "work", "list", "--state", "claimed"])
                .as_array()
                .and_then(|rows| rows.iter().find(|r| r["key"] == key).cloned())
        });
        let mut holder = row["holder"].clone();
        let since = holder
            .as_object_mut()
            .and_then(|h| h.remove("since"))
            .unwrap_or_default();
        assert_eq!(holder, expected, "{row}");
        assert!(since.as_str().is_some_and(|s| s.ends_with('Z')), "{row}");
        let shown = ok(&db, &["admin", "work", "show", key]);
        assert_eq!(shown["holder"]["workerId"], expected["workerId"], "{shown}");
        assert_eq!(shown["holder"]["since"], since, "{shown}");
        let (code, table, stderr) = run(
            Some(&db.url),
            &["admin", "work", "list", "--state", "claimed"],
        );
        assert_eq!(code, 0, "{stderr}");
        let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(
            header,
            [
                "ID",
                "KEY",
                "OPERATION",
                "ATTEMPTS",
                "WORKER",
                "HOST",
                "PID",
                "SINCE"
            ]
        );
        let line = table.lines().find(|l| l.contains(key)).expect(&table);
        for field in [
            started["workerId"].as_str().unwrap(),
            started["host"].as_str().unwrap(),
            &worker.pid().to_string(),
        ] {
            assert!(line.contains(field), "{field} in {table}");
        }
    }
    worker.signal("TERM");
    let (status, stderr) = worker.wait(Duration::from_secs(20));
    assert!(status.success(), "{stderr}");
    let shown = ok(&db, &["admin", "work", "show", "namespace:team-b:delete"]);
    assert_eq!(shown["state"], "queued", "{shown}");
    assert!(shown.get("holder").is_none(), "{shown}");
}
