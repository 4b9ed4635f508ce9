//! SPEC §19 Data, G8 and G19's data: the built-in repository policy (grants per Namespace,
//! standing approvals per Agent and REF), its admission through `admin repository` and
//! `admin agent deploy --repository … [--repository-deadline DURATION | --standing]`, and the
//! CHECKs that hold a revision's repository credentials, its sessions and the approvals.
//! Everything runs through the CLI binary or SQL against PostgreSQL; every refusal is checked
//! for its exit code, its one line, and that nothing was written.

use crate::agent::{audits, fixture, user, Fixture};
use crate::support::LoggedOutput;
use crate::support::{one, TestDb};
use postgres::error::SqlState;
use postgres::Client as Sql;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_occ-worker");

/// A scratch directory with an Installation configuration file selecting a sandbox, the
/// built-in repository policy and a repository sender (`git-1`), removed on drop.
struct Installation {
    dir: PathBuf,
}

impl Installation {
    fn new(name: &str) -> Installation {
        let dir = std::env::temp_dir().join(format!(
            "occ-repository-policy-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["git-sender.test".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::File::create(dir.join("ca.pem"))
            .and_then(|mut f| f.write_all(cert.pem().as_bytes()))
            .unwrap();
        let sandbox = json!({"id": "sbx", "implementation": "kubernetes-sandbox", "facets": ["read-only-root"]});
        std::fs::write(
            dir.join("with-sender.json"),
            json!({
                "sandbox": sandbox,
                "repositoryPolicy": {"id": "repos", "implementation": "occ-repository-policy"},
                "repositorySender": {"id": "git-1", "url": "https://git-sender.test:9444",
                                     "caFile": dir.join("ca.pem").display().to_string()},
            })
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            dir.join("without-sender.json"),
            json!({"sandbox": sandbox}).to_string(),
        )
        .unwrap();
        Installation { dir }
    }

    fn with_sender(&self) -> PathBuf {
        self.dir.join("with-sender.json")
    }

    fn without_sender(&self) -> PathBuf {
        self.dir.join("without-sender.json")
    }
}

impl Drop for Installation {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `occ-worker ARGS --json` with the Installation configuration file `config`: (exit, JSON
/// answer or null, stderr).
fn run(db: &TestDb, config: Option<&Path>, args: &[&str]) -> (i32, Value, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .arg("--json")
        .env("OCC_DATABASE_URL", &db.url)
        .env("OCC_WORKER_DB_TIMEOUT_MS", "3000")
        .env_remove("OCC_COMPUTE_DRIVER")
        .env_remove("OCC_INSTALLATION_CONFIG")
        .env_remove("OCC_WORKER_MODE");
    if let Some(path) = config {
        cmd.env("OCC_INSTALLATION_CONFIG", path);
    }
    let out = cmd
        .logged_output("repository_policy.occ-worker")
        .expect("run occ-worker");
    let stdout = String::from_utf8_lossy(&out.stdout);
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `admin repository ARGS`, which must succeed: its JSON answer.
fn repository(db: &TestDb, args: &[&str]) -> Value {
    let mut all = vec!["admin", "repository"];
    all.extend_from_slice(args);
    let (code, value, stderr) = run(db, None, &all);
    assert_eq!(code, 0, "{args:?}: {stderr}");
    value
}

/// `admin agent deploy ns1 bot` on the scripted Compute with EXTRA, under `config`.
fn deploy(db: &TestDb, config: Option<&Path>, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec![
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
        "--harness-secret",
        "key",
        "--compute-id",
        "scripted",
        "--compute-implementation",
        "scripted",
    ];
    args.extend_from_slice(extra);
    run(db, config, &args)
}

/// Everything a refused admission must leave as it was: the revisions (with their
/// credentials), the work, the grants, the approvals and the audit trail.
fn written(c: &mut Sql) -> Value {
    one(
        c,
        "SELECT jsonb_build_object(
            'revisions', (SELECT coalesce(jsonb_agg(jsonb_build_array(id, repository_credentials)
                                          ORDER BY revision), '[]') FROM occ.agent_revisions),
            'work', (SELECT count(*) FROM occ.work),
            'grants', (SELECT coalesce(jsonb_agg(to_jsonb(g) ORDER BY repository_ref), '[]')
                       FROM occ.repository_grants g),
            'approvals', (SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY repository_ref), '[]')
                          FROM occ.repository_standing_approvals a),
            'audits', (SELECT count(*) FROM occ.audit_events))",
        &[],
    )
}

/// The hex SHA-256 of `<REF>\n<scope>` (SPEC §19 Data), by PostgreSQL's own `sha256`.
fn fingerprint(c: &mut Sql, reference: &str, scope: &str) -> String {
    one(
        c,
        "SELECT encode(sha256(convert_to($1::text || E'\\n' || $2::text, 'UTF8')), 'hex')",
        &[&reference, &scope],
    )
}

/// Asserts a refusal: `code`, one line beginning `occ-worker: {what} refused: ` and holding
/// `says`, and nothing written.
fn refused(before: &Value, c: &mut Sql, got: (i32, Value, String), code: i32, says: &str) {
    let (exit, _, stderr) = got;
    assert_eq!(exit, code, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(" refused: ") && stderr.contains(says),
        "{stderr}"
    );
    assert_eq!(&written(c), before, "written after: {stderr}");
}

const APP: &str = "github.com/acme/app";
const DOCS: &str = "github.com/acme/docs";

#[test]
fn g8_admission_snapshots_grants_and_the_standing_approval_and_refuses_the_rest() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    let installation = Installation::new("g8");
    let config = installation.with_sender();
    let config = Some(config.as_path());

    // Grants: a REF at a scope; granted again, its scope is set.
    let granted = repository(
        &db,
        &["grant", "ns1", APP, "--scope", "read", "--actor", "admin"],
    );
    assert_eq!(
        (
            &granted["repositoryRef"],
            &granted["scope"],
            &granted["changed"]
        ),
        (&json!(APP), &json!("read"), &json!(true))
    );
    let regranted = repository(
        &db,
        &["grant", "ns1", APP, "--scope", "write", "--actor", "admin"],
    );
    assert_eq!(
        (&regranted["scope"], &regranted["previousScope"]),
        (&json!("write"), &json!("read"))
    );
    repository(&db, &["grant", "ns1", DOCS, "--actor", "admin"]);
    let list = repository(&db, &["list", "ns1"]);
    let grants: Vec<(&str, &str)> = list["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["repositoryRef"].as_str().unwrap(),
                g["scope"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(grants, [(APP, "write"), (DOCS, "read")]);
    assert_eq!(
        audits(&mut c, "openclaw.repositories.grant").len(),
        3,
        "each grant is audited"
    );

    // Refusals, each exit 1 in one line with nothing written.
    let before = written(&mut c);
    refused(
        &before,
        &mut c,
        deploy(&db, config, &["--repository", "github.com/acme/other"]),
        1,
        "repository github.com/acme/other is not granted to Namespace ns1",
    );
    refused(
        &before,
        &mut c,
        deploy(&db, config, &["--repository", &format!("{DOCS}=write")]),
        1,
        "repository github.com/acme/docs is granted to Namespace ns1 for read only, not write",
    );
    refused(
        &before,
        &mut c,
        deploy(&db, config, &["--repository", APP, "--standing"]),
        1,
        "has no standing approval of repository github.com/acme/app",
    );
    let without = installation.without_sender();
    refused(
        &before,
        &mut c,
        deploy(&db, Some(&without), &["--repository", APP]),
        1,
        "no repository sender is selected",
    );
    refused(
        &before,
        &mut c,
        deploy(&db, None, &["--repository", APP]),
        1,
        "no repository sender is selected",
    );
    // An approval needs the REF granted at its scope.
    refused(
        &before,
        &mut c,
        run(
            &db,
            None,
            &[
                "admin",
                "repository",
                "approve",
                "ns1",
                "bot",
                DOCS,
                "--scope",
                "write",
                "--actor",
                "admin",
            ],
        ),
        1,
        "for read only, not write",
    );
    refused(
        &before,
        &mut c,
        run(
            &db,
            None,
            &[
                "admin",
                "repository",
                "approve",
                "ns1",
                "bot",
                "gitlab.example/x",
                "--actor",
                "admin",
            ],
        ),
        1,
        "repository gitlab.example/x is not granted",
    );
    // Revoking or unapproving nothing.
    refused(
        &before,
        &mut c,
        run(
            &db,
            None,
            &[
                "admin",
                "repository",
                "revoke",
                "ns1",
                "gitlab.example/x",
                "--actor",
                "admin",
            ],
        ),
        1,
        "repository gitlab.example/x is not granted to Namespace ns1",
    );
    refused(
        &before,
        &mut c,
        run(
            &db,
            None,
            &[
                "admin",
                "repository",
                "unapprove",
                "ns1",
                "bot",
                APP,
                "--actor",
                "admin",
            ],
        ),
        1,
        "has no standing approval of repository github.com/acme/app",
    );
    // No `administer` on the Namespace: a viewer may not grant, revoke, approve or unapprove.
    user(&mut c, "viewer", "viewer");
    let before = written(&mut c);
    for args in [
        vec!["grant", "ns1", "github.com/acme/new", "--actor", "viewer"],
        vec!["revoke", "ns1", DOCS, "--actor", "viewer"],
        vec!["approve", "ns1", "bot", APP, "--actor", "viewer"],
        vec!["unapprove", "ns1", "bot", APP, "--actor", "viewer"],
    ] {
        let mut all = vec!["admin", "repository"];
        all.extend_from_slice(&args);
        refused(
            &before,
            &mut c,
            run(&db, None, &all),
            1,
            "viewer may not administer namespace",
        );
    }
    // A read needs nothing more than `admin agent show` does.
    assert_eq!(
        repository(&db, &["list", "ns1"])["grants"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Standing approvals: new id and generation 1; the same scope changes nothing; another
    // scope raises the generation and changes the fingerprint.
    let approved = repository(&db, &["approve", "ns1", "bot", APP, "--actor", "admin"]);
    let id = approved["id"].as_str().unwrap().to_string();
    assert_eq!(
        (
            &approved["generation"],
            &approved["scope"],
            &approved["changed"]
        ),
        (&json!(1), &json!("read"), &json!(true))
    );
    assert_eq!(
        approved["scopeFingerprint"],
        json!(fingerprint(&mut c, APP, "read"))
    );
    let again = repository(
        &db,
        &[
            "approve", "ns1", "bot", APP, "--scope", "read", "--actor", "admin",
        ],
    );
    assert_eq!(
        (&again["id"], &again["generation"], &again["changed"]),
        (&json!(id), &json!(1), &json!(false))
    );
    let raised = repository(
        &db,
        &[
            "approve", "ns1", "bot", APP, "--scope", "write", "--actor", "admin",
        ],
    );
    let write_fingerprint = fingerprint(&mut c, APP, "write");
    assert_eq!(
        (
            &raised["id"],
            &raised["generation"],
            &raised["scopeFingerprint"]
        ),
        (&json!(id), &json!(2), &json!(write_fingerprint))
    );
    let approvals = audits(&mut c, "openclaw.repositories.approve");
    assert_eq!(approvals.len(), 3, "{approvals:?}");
    assert!(approvals
        .iter()
        .all(|(_, _, _, resource)| resource == &agent));
    let listed = repository(&db, &["list", "ns1", "bot"]);
    assert_eq!(listed["approvals"].as_array().unwrap().len(), 1);
    assert_eq!(listed["approvals"][0]["id"], json!(id));
    assert_eq!(listed["approvals"][0]["agent"], json!("bot"));

    // --standing snapshots the approval of the first REF, the bindings in order, the sender.
    let (code, standing, stderr) = deploy(
        &db,
        config,
        &[
            "--repository",
            &format!("{APP}=write"),
            "--repository",
            DOCS,
            "--standing",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let expected = json!({
        "senderId": "git-1",
        "bindings": [{"repositoryRef": APP, "scope": "write"},
                     {"repositoryRef": DOCS, "scope": "read"}],
        "standingApprovalId": id,
        "standingApprovalGeneration": 2,
        "standingApprovalScopeFingerprint": write_fingerprint,
    });
    assert_eq!(standing["repositoryCredentials"], expected);
    let stored: Value = one(
        &mut c,
        "SELECT repository_credentials FROM occ.agent_revisions WHERE id = $1",
        &[&standing["revisionId"].as_str().unwrap()],
    );
    assert_eq!(stored, expected);
    let details: Value = one(
        &mut c,
        "SELECT details FROM occ.audit_events WHERE action = 'openclaw.agents.deploy.admit'
         ORDER BY id DESC LIMIT 1",
        &[],
    );
    assert_eq!(details["repositoryCredentials"], expected);

    // Else a deadline: the database clock plus the duration, 8 hours unless given.
    for (extra, minutes) in [
        (vec!["--repository-deadline", "90m"], 90.0),
        (vec![], 480.0),
    ] {
        let mut args = vec!["--repository", DOCS];
        args.extend_from_slice(&extra);
        let (code, answer, stderr) = deploy(&db, config, &args);
        assert_eq!(code, 0, "{stderr}");
        let credentials = &answer["repositoryCredentials"];
        assert_eq!(
            credentials.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["bindings", "deadlineAt", "senderId"]
        );
        let deadline = credentials["deadlineAt"].as_str().unwrap();
        assert_eq!(
            deadline.len(),
            "2026-01-01T00:00:00.000Z".len(),
            "{deadline}"
        );
        let left: f64 = one(
            &mut c,
            "SELECT extract(epoch FROM $1::text::timestamptz - clock_timestamp())::float8 / 60",
            &[&deadline],
        );
        assert!(
            left > minutes - 1.0 && left <= minutes,
            "{left} of {minutes} minutes"
        );
    }

    // `admin agent show` names each revision's snapshot, null without one.
    let (code, show, stderr) = run(&db, None, &["admin", "agent", "show", "ns1", "bot"]);
    assert_eq!(code, 0, "{stderr}");
    let snapshots: Vec<&Value> = show["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["repositoryCredentials"])
        .collect();
    assert_eq!(snapshots.len(), 3);
    assert_eq!(snapshots[0], &expected);
    assert!(snapshots[1]["deadlineAt"].is_string());

    // A deployment without repositories snapshots none, whatever the Installation selects.
    let (code, plain, stderr) = deploy(&db, config, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(plain["repositoryCredentials"], Value::Null);

    // Revoke and unapprove remove the rows, audited.
    let revoked = repository(&db, &["revoke", "ns1", DOCS, "--actor", "admin"]);
    assert_eq!(revoked["revokedScope"], json!("read"));
    let unapproved = repository(&db, &["unapprove", "ns1", "bot", APP, "--actor", "admin"]);
    assert_eq!(unapproved["id"], json!(id));
    let list = repository(&db, &["list", "ns1"]);
    assert_eq!(list["grants"].as_array().unwrap().len(), 1);
    assert_eq!(list["approvals"], json!([]));
    assert_eq!(audits(&mut c, "openclaw.repositories.revoke").len(), 1);
    assert_eq!(audits(&mut c, "openclaw.repositories.unapprove").len(), 1);
    // The revisions keep their snapshot: a revocation is decided on the next pass (G19).
    let kept: Value = one(
        &mut c,
        "SELECT repository_credentials FROM occ.agent_revisions WHERE id = $1",
        &[&standing["revisionId"].as_str().unwrap()],
    );
    assert_eq!(kept, expected);
}

#[test]
fn g8_bad_input_writes_nothing() {
    let Fixture { db, .. } = fixture();
    let mut c = db.client();
    let installation = Installation::new("bad-input");
    let config = installation.with_sender();
    let config = Some(config.as_path());
    repository(&db, &["grant", "ns1", APP, "--actor", "admin"]);
    let before = written(&mut c);
    for (extra, says) in [
        (
            vec!["--repository", "GitHub.com/acme/app"],
            "--repository must be HOST/PATH",
        ),
        (
            vec!["--repository", "github.com/acme/../app"],
            "got \"github.com/acme/../app\"",
        ),
        (
            vec!["--repository", "github.com/acme/app=admin"],
            "has scope \"admin\"; the scope is read or write",
        ),
        (
            vec!["--repository", APP, "--repository", &format!("{APP}=read")],
            "--repository github.com/acme/app is given twice",
        ),
        (
            vec!["--repository", APP, "--repository-deadline", "8"],
            "--repository-deadline must be <n>m, <n>h or <n>d from 1m to 7d, got \"8\"",
        ),
        (
            vec!["--repository", APP, "--repository-deadline", "8d"],
            "got \"8d\"",
        ),
        (
            vec!["--repository", APP, "--repository-deadline", "0m"],
            "got \"0m\"",
        ),
        (vec!["--standing"], "--standing needs a --repository"),
        (
            vec!["--repository-deadline", "1h"],
            "--repository-deadline needs a --repository",
        ),
    ] {
        refused(&before, &mut c, deploy(&db, config, &extra), 2, says);
    }
    // The two ways to bound the access exclude each other.
    let (code, _, stderr) = deploy(
        &db,
        config,
        &[
            "--repository",
            APP,
            "--repository-deadline",
            "1h",
            "--standing",
        ],
    );
    assert_eq!(
        (code, stderr.as_str()),
        (
            2,
            "occ-worker: --repository-deadline and --standing are mutually exclusive: give one of them\n"
        )
    );
    assert_eq!(written(&mut c), before);
    // A malformed REF to `admin repository`: exit 2, named as typed.
    for args in [
        vec!["grant", "ns1", "github.com", "--actor", "admin"],
        vec![
            "revoke",
            "ns1",
            "https://github.com/acme/app",
            "--actor",
            "admin",
        ],
        vec![
            "approve",
            "ns1",
            "bot",
            "github.com/acme/",
            "--actor",
            "admin",
        ],
        vec![
            "unapprove",
            "ns1",
            "bot",
            "github.com//app",
            "--actor",
            "admin",
        ],
    ] {
        let typed = format!("{:?}", args[args.len() - 3]);
        let mut all = vec!["admin", "repository"];
        all.extend_from_slice(&args);
        refused(&before, &mut c, run(&db, None, &all), 2, &typed);
    }
    // A scope other than read or write, said as typed.
    for verb in ["grant", "approve"] {
        let mut all = vec!["admin", "repository", verb, "ns1"];
        if verb == "approve" {
            all.push("bot");
        }
        all.extend_from_slice(&[APP, "--scope", "admin", "--actor", "admin"]);
        refused(
            &before,
            &mut c,
            run(&db, None, &all),
            2,
            "--scope must be read or write, got \"admin\"",
        );
    }
    // Admission refuses the same input itself, as bad input (SQLSTATE 22023), for any caller.
    for (sql, params) in [
        (
            "SELECT occ.repository_grant('admin', 'ns1', $1, 'read')",
            "github.com/a/..",
        ),
        (
            "SELECT occ.repository_grant('admin', 'ns1', 'github.com/a/b', $1)",
            "admin",
        ),
        (
            "SELECT occ.agent_deploy('ns1', 'bot', 'admin', 'cfg', 'codex', 'dedicated', 'key',
                 'scripted', 'scripted', p_repositories => jsonb_build_array(
                 jsonb_build_object('repositoryRef', $1::text)), p_repository_sender_id => 'git-1',
                 p_repository_deadline => interval '8 days')",
            APP,
        ),
        (
            "SELECT occ.agent_deploy('ns1', 'bot', 'admin', 'cfg', 'codex', 'dedicated', 'key',
                 'scripted', 'scripted', p_repositories => jsonb_build_array(
                 jsonb_build_object('repositoryRef', $1::text)), p_repository_sender_id => 'git-1',
                 p_repository_deadline => interval '1 hour', p_standing => true)",
            APP,
        ),
        (
            "SELECT occ.agent_deploy('ns1', 'bot', 'admin', 'cfg', 'codex', 'dedicated', 'key',
                 'scripted', 'scripted', p_repositories => jsonb_build_array(
                 jsonb_build_object('repositoryRef', $1::text),
                 jsonb_build_object('repositoryRef', $1::text, 'scope', 'read')),
                 p_repository_sender_id => 'git-1')",
            APP,
        ),
    ] {
        let e = c.query_one(sql, &[&params]).expect_err(sql);
        assert_eq!(
            e.code(),
            Some(&SqlState::INVALID_PARAMETER_VALUE),
            "{sql}: {e}"
        );
    }
    assert_eq!(written(&mut c), before);
}

/// Inserts a revision copied from `from` with `credentials`: the insert's result.
fn revision_with(
    c: &mut Sql,
    from: &str,
    id: &str,
    credentials: &Value,
) -> Result<u64, postgres::Error> {
    c.execute(
        "INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id,
             service_principal_id, configuration_id, configuration_generation, document,
             harness_id, harness_version, harness_mode, execution_mode, compute_id,
             compute_implementation, harness_auth, repository_credentials)
         SELECT $2, namespace_id, agent_id,
             (SELECT max(revision) + 1 FROM occ.agent_revisions r WHERE r.agent_id = x.agent_id),
             actor_id, service_principal_id, configuration_id, configuration_generation, document,
             harness_id, harness_version, harness_mode, execution_mode, compute_id,
             compute_implementation, harness_auth, $3
         FROM occ.agent_revisions x WHERE id = $1",
        &[&from, &id, credentials],
    )
}

fn check_violation(result: Result<u64, postgres::Error>) -> String {
    let e = result.expect_err("refused");
    let db = e.as_db_error().unwrap_or_else(|| panic!("{e}"));
    assert_eq!(db.code(), &SqlState::CHECK_VIOLATION, "{e}");
    db.constraint().unwrap_or(db.message()).to_string()
}

#[test]
fn g19_data_checks_refuse_malformed_credentials_sessions_and_approvals() {
    let Fixture { db, agent, .. } = fixture();
    let mut c = db.client();
    let rev = crate::agent::deploy(&mut c, &agent);
    let deadline = json!({"senderId": "git-1", "deadlineAt": "2026-12-06T08:00:00.000Z",
                          "bindings": [{"repositoryRef": APP, "scope": "read"}]});
    let standing = json!({"senderId": "git-1", "bindings": [{"repositoryRef": APP, "scope": "write"}],
        "standingApprovalId": "0b5c2d0e-8f4a-4c1e-9d3b-2a6f7e8c9d01",
        "standingApprovalGeneration": 3,
        "standingApprovalScopeFingerprint": "a".repeat(64)});
    let shape = "agent_revisions_repository_credentials_check";
    let mut n = 0;
    let mut refuses = |c: &mut Sql, credentials: Value, why: &str| {
        n += 1;
        check_violation(revision_with(
            c,
            &rev,
            &format!("rev-bad-{n}"),
            &credentials,
        ))
        .contains(why)
    };
    let with = |base: &Value, key: &str, value: Value| {
        let mut v = base.clone();
        v[key] = value;
        v
    };
    let without = |base: &Value, key: &str| {
        let mut v = base.clone();
        v.as_object_mut().unwrap().remove(key);
        v
    };
    for (bad, why) in [
        (json!([]), shape),
        (without(&deadline, "senderId"), shape),
        (with(&deadline, "senderId", json!(" ")), shape),
        (with(&deadline, "bindings", json!([])), shape),
        (
            with(&deadline, "bindings", json!({"repositoryRef": APP})),
            shape,
        ),
        (
            with(&deadline, "bindings", json!([{"repositoryRef": APP}])),
            shape,
        ),
        (
            with(
                &deadline,
                "bindings",
                json!([{"repositoryRef": APP, "scope": "admin"}]),
            ),
            shape,
        ),
        (
            with(
                &deadline,
                "bindings",
                json!([{"repositoryRef": APP, "scope": ["read"]}]),
            ),
            shape,
        ),
        (
            with(
                &deadline,
                "bindings",
                json!([{"repositoryRef": [APP], "scope": "read"}]),
            ),
            shape,
        ),
        (
            with(
                &deadline,
                "bindings",
                json!([{"repositoryRef": APP, "scope": "read", "x": 1}]),
            ),
            shape,
        ),
        (
            with(
                &deadline,
                "bindings",
                json!([[{"repositoryRef": APP, "scope": "read"}]]),
            ),
            shape,
        ),
        (
            with(&deadline, "deadlineAt", json!("2026-12-06T08:00:00Z")),
            shape,
        ),
        (with(&deadline, "extra", json!(1)), shape),
        (
            with(&standing, "deadlineAt", json!("2026-12-06T08:00:00.000Z")),
            shape,
        ),
        (without(&standing, "standingApprovalGeneration"), shape),
        (
            with(&standing, "standingApprovalGeneration", json!(0)),
            shape,
        ),
        (
            with(&standing, "standingApprovalGeneration", json!("3")),
            shape,
        ),
        (
            with(&standing, "standingApprovalId", json!("not-a-uuid")),
            shape,
        ),
        (
            with(
                &standing,
                "standingApprovalScopeFingerprint",
                json!("A".repeat(64)),
            ),
            shape,
        ),
        (without(&deadline, "deadlineAt"), shape),
        // Each REF's rule and the absence of a repeated REF are the revision guard's.
        (
            with(
                &deadline,
                "bindings",
                json!([{"repositoryRef": "GitHub.com/a", "scope": "read"}]),
            ),
            "bind each repository once, by a REF",
        ),
        (
            with(
                &deadline,
                "bindings",
                json!([{"repositoryRef": APP, "scope": "read"},
                                               {"repositoryRef": DOCS, "scope": "read"},
                                               {"repositoryRef": APP, "scope": "write"}]),
            ),
            "bind each repository once, by a REF",
        ),
    ] {
        assert!(refuses(&mut c, bad.clone(), why), "{bad}");
    }
    // The two shapes admission writes are admitted.
    revision_with(&mut c, &rev, "rev-deadline", &deadline).unwrap();
    revision_with(&mut c, &rev, "rev-standing", &standing).unwrap();

    // The domain of a REF column and `occ.is_repository_ref` are one rule.
    for (reference, ok) in [
        (APP, true),
        ("gitlab.example:8443/group/sub/app.git", true),
        ("a/b", true),
        ("GitHub.com/a", false),
        ("github.com", false),
        ("github.com/a/..", false),
        ("github.com/./a", false),
        ("github.com//a", false),
        ("x.com:123456/a", false),
        ("git.x/a b", false),
    ] {
        let function: bool = one(&mut c, "SELECT occ.is_repository_ref($1)", &[&reference]);
        let domain = c
            .query_one("SELECT $1::text::occ.repository_ref", &[&reference])
            .is_ok();
        assert_eq!((function, domain), (ok, ok), "{reference}");
    }
    let long = format!("h.io/{}", "a".repeat(252));
    let fits: bool = one(&mut c, "SELECT occ.is_repository_ref($1)", &[&&long[..256]]);
    let over: bool = one(&mut c, "SELECT occ.is_repository_ref($1)", &[&long]);
    assert_eq!((fits, over), (true, false));

    // Sessions: each column's shape, `open` with its session and material, one live row per
    // revision and REF.
    let session = |c: &mut Sql,
                   admission: &str,
                   reference: &str,
                   session: Option<&str>,
                   phase: &str,
                   material: Option<&str>| {
        c.execute(
            "INSERT INTO occ.repository_sessions (namespace_id, agent_id, revision_id,
                 admission_id, repository_ref, session_id, phase, material_ref)
             SELECT namespace_id, agent_id, id, $2::text::uuid, $3::text, $4::text, $5::text,
                 $6::text
             FROM occ.agent_revisions WHERE id = $1",
            &[
                &"rev-deadline",
                &admission,
                &reference,
                &session,
                &phase,
                &material,
            ],
        )
    };
    let a = |n: u32| format!("00000000-0000-4000-8000-{n:012}");
    let material = Some("team-a/git-app/token");
    for (n, reference, sid, phase, material, why) in [
        (
            1,
            APP,
            Some("s-1"),
            "ready",
            material,
            "repository_sessions_phase_check",
        ),
        (
            2,
            APP,
            None,
            "open",
            material,
            "repository_sessions_material_check",
        ),
        (
            3,
            APP,
            Some("s-3"),
            "open",
            None,
            "repository_sessions_open_check",
        ),
        (
            4,
            APP,
            Some("-s"),
            "opening",
            None,
            "repository_sessions_session_id_check",
        ),
        (
            5,
            APP,
            Some("s-5"),
            "open",
            Some("team-a/git-app"),
            "repository_sessions_material_ref_check",
        ),
        (
            6,
            APP,
            Some("s-6"),
            "open",
            Some("Team/git/x"),
            "repository_sessions_material_ref_check",
        ),
        (
            7,
            "github.com/a/..",
            None,
            "opening",
            None,
            "repository_ref_check",
        ),
    ] {
        let got = check_violation(session(&mut c, &a(n), reference, sid, phase, material));
        assert_eq!(got, why, "session {n}");
    }
    session(&mut c, &a(10), APP, Some("s-10"), "open", material).unwrap();
    let twice = session(&mut c, &a(11), APP, None, "opening", None).expect_err("one live row");
    assert_eq!(twice.code(), Some(&SqlState::UNIQUE_VIOLATION));
    // A closing or disposed row does not count as live.
    session(&mut c, &a(12), APP, Some("s-12"), "closing", None).unwrap();
    session(&mut c, &a(13), DOCS, None, "opening", None).unwrap();
    c.execute(
        "INSERT INTO occ.repository_executions (namespace_id, revision_id, execution)
         VALUES ('ns1', 'rev-deadline', '{\"podUids\": [\"u-1\"]}')",
        &[],
    )
    .unwrap();
    let bad_execution = c.execute(
        "INSERT INTO occ.repository_executions (namespace_id, revision_id, execution)
         VALUES ('ns1', 'rev-standing', '\"u-1\"')",
        &[],
    );
    assert_eq!(
        check_violation(bad_execution),
        "repository_executions_execution_check"
    );
    let (code, sessions, stderr) = run(
        &db,
        None,
        &["admin", "repository", "sessions", "ns1", "bot"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(sessions.as_array().unwrap().len(), 3);
    assert!(sessions
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["revisionId"] == json!("rev-deadline") && s.get("materialRef").is_none()));
    let phases: Vec<&str> = sessions
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["opening", "closing", "open"], "newest first");

    // Approvals: the fingerprint is the one of the REF and scope.
    c.execute(
        "INSERT INTO occ.repository_grants (namespace_id, repository_ref, scope, created_by)
         VALUES ('ns1', $1::text, 'write', 'admin')",
        &[&APP],
    )
    .unwrap();
    let wrong = c.execute(
        "INSERT INTO occ.repository_standing_approvals (namespace_id, agent_id, repository_ref,
             id, generation, scope, scope_fingerprint, approved_by)
         VALUES ('ns1', $1, $2::text, gen_random_uuid(), 1, 'write',
                 encode(sha256(convert_to($2::text || E'\\n' || 'read', 'UTF8')), 'hex'), 'admin')",
        &[&agent, &APP],
    );
    assert_eq!(
        check_violation(wrong),
        "repository_standing_approvals_fingerprint_check"
    );
    let approved: Value = one(
        &mut c,
        "SELECT occ.repository_approve('admin', 'ns1', 'bot', $1, 'write')",
        &[&APP],
    );
    assert_eq!(approved["generation"], json!(1));

    // Sessions and executions go with their revision, approvals with their Agent; grants are
    // the Namespace's.
    let counts = |c: &mut Sql| -> (i64, i64, i64, i64) {
        let r = c
            .query_one(
                "SELECT (SELECT count(*) FROM occ.repository_sessions),
                        (SELECT count(*) FROM occ.repository_executions),
                        (SELECT count(*) FROM occ.repository_standing_approvals),
                        (SELECT count(*) FROM occ.repository_grants)",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2), r.get(3))
    };
    assert_eq!(counts(&mut c), (3, 1, 1, 1));
    c.execute("DELETE FROM occ.agents WHERE id = $1", &[&agent])
        .unwrap();
    assert_eq!(counts(&mut c), (0, 0, 0, 1));
}
