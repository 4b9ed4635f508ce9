//! SPEC §13, Data and Admission and CLI: credential sources are Namespace-owned references
//! whose shape PostgreSQL enforces, admitted and disabled (never deleted) by authorized,
//! audited SQL functions, and managed from `occ-worker admin credential-source`.

use crate::cli::{ok, refused};
use crate::kube_e2e::scratch;
use crate::support::{insert_namespace, TestDb};
use serde_json::{json, Value};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_occ-worker");
const BACKEND_REF: &str = "occ-ns-team-b/model-keys/openai";

/// A bootstrapped database with the ready Namespace `team-b`.
fn team_b() -> TestDb {
    let db = TestDb::bootstrapped();
    insert_namespace(&mut db.client(), "team-b", "ready");
    db
}

/// Inserts a source row directly, past admission, to exercise the table's constraints.
fn insert(
    db: &TestDb,
    kind: &str,
    owner: &str,
    backend_ref: &str,
    egress: Option<Value>,
) -> Result<u64, postgres::Error> {
    db.client().execute(
        "INSERT INTO occ.credential_sources (namespace_id, id, kind, owner, driver_id, backend_ref,
                                             egress, created_by)
         VALUES ('team-b', 'src', $1, $2, 'gw-1', $3, $4, 'admin')",
        &[&kind, &owner, &backend_ref, &egress],
    )
}

fn violated(result: Result<u64, postgres::Error>) -> String {
    let e = result.expect_err("the row must be refused");
    e.as_db_error()
        .and_then(|d| d.constraint())
        .unwrap_or_default()
        .to_string()
}

/// `occ.credential_source_create` as `actor` with the `gw-1` Credential Gateway.
fn create(db: &TestDb, id: &str, actor: &str) -> Result<Value, postgres::Error> {
    db.client()
        .query_one(
            "SELECT occ.credential_source_create('team-b', $1, 'model_key', $2,
                 'credential_gateway', 'gw-1', NULL, $3)",
            &[&id, &BACKEND_REF, &actor],
        )
        .map(|row| row.get(0))
}

fn disable(db: &TestDb, id: &str, actor: &str) -> Result<Value, postgres::Error> {
    db.client()
        .query_one(
            "SELECT occ.credential_source_disable('team-b', $1, $2)",
            &[&id, &actor],
        )
        .map(|row| row.get(0))
}

fn message(e: postgres::Error) -> String {
    e.as_db_error()
        .expect("a database error")
        .message()
        .to_string()
}

fn audits(db: &TestDb, action: &str) -> Vec<(String, String, String)> {
    db.client()
        .query(
            "SELECT actor_id, resource_kind, resource_id FROM occ.audit_events
             WHERE action = $1 ORDER BY id",
            &[&action],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

fn grant(db: &TestDb, principal: &str, role: &str, scope: &str) {
    ok(
        db,
        &["admin", "identity", "create", principal, "--actor", "admin"],
    );
    ok(
        db,
        &[
            "admin", "grant", principal, role, "--scope", scope, "--actor", "admin",
        ],
    );
}

#[test]
fn e_data_constraints_refuse_malformed_sources() {
    let db = team_b();
    let egress = |v: Value| Some(v);
    let cases = [
        (
            insert(&db, "api_key", "credential_gateway", BACKEND_REF, None),
            "credential_sources_kind_check",
        ),
        (
            insert(&db, "tool", "vault", BACKEND_REF, None),
            "credential_sources_owner_check",
        ),
        (
            insert(&db, "tool", "credential_gateway", "model-keys/openai", None),
            "credential_sources_backend_ref_check",
        ),
        (
            insert(
                &db,
                "tool",
                "credential_gateway",
                "Occ/model-keys/openai",
                None,
            ),
            "credential_sources_backend_ref_check",
        ),
        (
            insert(
                &db,
                "tool",
                "credential_gateway",
                BACKEND_REF,
                egress(json!({"provider": "openai"})),
            ),
            "credential_sources_egress_check",
        ),
        (
            insert(
                &db,
                "tool",
                "credential_gateway",
                BACKEND_REF,
                egress(json!({"provider": "openai", "backend": ""})),
            ),
            "credential_sources_egress_check",
        ),
        (
            insert(
                &db,
                "tool",
                "credential_gateway",
                BACKEND_REF,
                egress(json!({"provider": "openai", "backend": "b", "x": 1})),
            ),
            "credential_sources_egress_check",
        ),
        (
            insert(
                &db,
                "tool",
                "credential_gateway",
                BACKEND_REF,
                egress(json!({"provider": 1, "backend": "b"})),
            ),
            "credential_sources_egress_check",
        ),
        (
            insert(
                &db,
                "tool",
                "credential_gateway",
                BACKEND_REF,
                egress(json!(["openai", "b"])),
            ),
            "credential_sources_egress_check",
        ),
    ];
    for (i, (result, constraint)) in cases.into_iter().enumerate() {
        assert_eq!(violated(result), constraint, "case {i}");
    }
    let disabled_without_when = db.client().execute(
        "INSERT INTO occ.credential_sources (namespace_id, id, kind, owner, driver_id, backend_ref,
                                             created_by, state)
         VALUES ('team-b', 'src', 'tool', 'credential_gateway', 'gw-1', $1, 'admin', 'disabled')",
        &[&BACKEND_REF],
    );
    assert_eq!(
        violated(disabled_without_when),
        "credential_sources_disabled_check"
    );
    let blank_driver = db.client().execute(
        "INSERT INTO occ.credential_sources (namespace_id, id, kind, owner, driver_id, backend_ref,
                                             created_by)
         VALUES ('team-b', 'src', 'tool', 'credential_gateway', ' ', $1, 'admin')",
        &[&BACKEND_REF],
    );
    assert_eq!(violated(blank_driver), "credential_sources_driver_id_check");
    insert(
        &db,
        "tool",
        "credential_proxy",
        BACKEND_REF,
        egress(json!({"provider": "openai", "backend": "api"})),
    )
    .expect("a well-formed source");
}

#[test]
fn e_data_create_and_disable_are_authorized_and_audited_and_keep_the_row() {
    let db = team_b();
    grant(&db, "nsadmin", "namespace-admin", "namespace:team-b");
    grant(&db, "watcher", "viewer", "namespace:team-b");
    assert_eq!(
        message(create(&db, "openai", "watcher").unwrap_err()),
        "watcher may not create credential_source: NO_MATCHING_BINDING (needs create credential_source on credential_source openai in Namespace team-b)"
    );
    let created = create(&db, "openai", "nsadmin").unwrap();
    assert_eq!(
        (
            &created["kind"],
            &created["owner"],
            &created["driverId"],
            &created["state"]
        ),
        (
            &json!("model_key"),
            &json!("credential_gateway"),
            &json!("gw-1"),
            &json!("ready")
        )
    );
    assert_eq!(
        audits(&db, "openclaw.credential_sources.create"),
        [(
            "nsadmin".into(),
            "credential_source".into(),
            "openai".into()
        )]
    );

    // agent-operator on the source reads and operates it, but may not disable it.
    grant(
        &db,
        "op",
        "agent-operator",
        "credential_source:team-b/openai",
    );
    let may = |action: &str| -> bool {
        db.client()
            .query_one(
                "SELECT occ.authorized('op', $1, 'credential_source', 'openai', 'team-b')",
                &[&action],
            )
            .unwrap()
            .get(0)
    };
    assert_eq!(
        (may("read"), may("operate"), may("administer")),
        (true, true, false)
    );
    assert!(message(disable(&db, "openai", "op").unwrap_err())
        .starts_with("op may not administer credential_source"));
    assert!(message(disable(&db, "openai", "watcher").unwrap_err())
        .starts_with("watcher may not administer credential_source"));

    let disabled = disable(&db, "openai", "nsadmin").unwrap();
    assert_eq!(
        (&disabled["state"], &disabled["disabledBy"]),
        (&json!("disabled"), &json!("nsadmin"))
    );
    assert!(message(disable(&db, "openai", "nsadmin").unwrap_err())
        .starts_with("credential source team-b/openai is already disabled (by nsadmin at "));
    let rows: i64 = db
        .client()
        .query_one(
            "SELECT count(*) FROM occ.credential_sources WHERE state = 'disabled'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    assert_eq!(
        audits(&db, "openclaw.credential_sources.disable"),
        [(
            "nsadmin".into(),
            "credential_source".into(),
            "openai".into()
        )]
    );
}

#[test]
fn e_data_grant_scope_names_a_credential_source() {
    let db = team_b();
    refused(
        Some(&db.url),
        &[
            "admin",
            "grant",
            "admin",
            "viewer",
            "--scope",
            "credential_source:team-b/nope",
            "--actor",
            "admin",
        ],
        1,
        "grant refused: no credential_source nope in Namespace team-b",
    );
    create(&db, "openai", "admin").unwrap();
    grant(
        &db,
        "op",
        "agent-operator",
        "credential_source:team-b/openai",
    );
    let grants = ok(
        &db,
        &[
            "admin",
            "grant",
            "list",
            "--scope",
            "credential_source:team-b/openai",
        ],
    );
    assert_eq!(grants.as_array().unwrap().len(), 1);
    assert_eq!(grants[0]["scope"], json!("credential_source:team-b/openai"));
}

/// `occ-worker ARGS` with the Installation configuration file `config` (or none).
fn run_with(db: &TestDb, config: Option<&std::path::Path>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("OCC_DATABASE_URL", &db.url)
        .env_remove("OCC_COMPUTE_DRIVER")
        .env_remove("OCC_INSTALLATION_CONFIG");
    if let Some(path) = config {
        cmd.env("OCC_INSTALLATION_CONFIG", path);
    }
    let out = cmd.output().expect("run occ-worker");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn e_admission_cli_creates_lists_shows_and_disables() {
    let db = team_b();
    let config = scratch("credential-sources-cli").join("installation.json");
    std::fs::write(
        &config,
        json!({
            "sandbox": {"id": "sbx", "implementation": "kubernetes-sandbox", "facets": ["read-only-root"]},
            "credentialGateway": {"id": "gw-1", "implementation": "kubernetes-secret-gateway"},
        })
        .to_string(),
    )
    .unwrap();
    let create = |id: &str, extra: &[&str], config: Option<&std::path::Path>| {
        let mut args = vec![
            "admin",
            "credential-source",
            "create",
            "team-b",
            id,
            "--backend-ref",
            BACKEND_REF,
            "--actor",
            "admin",
        ];
        args.extend_from_slice(extra);
        run_with(&db, config, &args)
    };
    assert_eq!(
        create("openai", &["--kind", "model_key"], None),
        (1, String::new(), "occ-worker: credential-source create refused: no Credential Gateway is selected (credentialGateway in the OCC_INSTALLATION_CONFIG file)\n".into())
    );
    assert_eq!(
        create("openai", &["--kind", "model_key", "--owner", "credential_proxy"], Some(&config)),
        (1, String::new(), "occ-worker: credential-source create refused: no Credential Proxy is built in (--owner credential_proxy)\n".into())
    );
    assert_eq!(
        create(
            "openai",
            &["--kind", "model_key", "--egress", "openai"],
            Some(&config)
        )
        .2,
        "occ-worker: credential-source create refused: --egress openai is not PROVIDER/BACKEND\n"
    );
    let (code, _, stderr) = create(
        "openai",
        &["--kind", "model_key", "--egress", "openai/api", "--json"],
        Some(&config),
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
    let (code, _, stderr) = create("github", &["--kind", "tool"], Some(&config));
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        create("github", &["--kind", "tool"], Some(&config)),
        (1, String::new(), "occ-worker: credential-source create refused: credential source github already exists in team-b\n".into())
    );
    assert_eq!(
        run_with(
            &db,
            Some(&config),
            &["admin", "credential-source", "create", "team-b", "bad", "--kind", "tool",
              "--backend-ref", "nope", "--actor", "admin"],
        ),
        (2, String::new(), "occ-worker: credential-source create refused: --backend-ref must look like NAMESPACE/NAME/KEY (a Kubernetes namespace and Secret name, then the key), got \"nope\"\n".into())
    );

    let (code, table, stderr) =
        run_with(&db, None, &["admin", "credential-source", "list", "team-b"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        table.lines().collect::<Vec<_>>(),
        [
            "ID      KIND       OWNER               DRIVER  STATE  BACKEND REF                      CREATED BY",
            "github  tool       credential_gateway  gw-1    ready  occ-ns-team-b/model-keys/openai  admin",
            "openai  model_key  credential_gateway  gw-1    ready  occ-ns-team-b/model-keys/openai  admin",
        ]
    );

    let shown = ok(
        &db,
        &["admin", "credential-source", "show", "team-b", "openai"],
    );
    assert_eq!(
        shown["egress"],
        json!({"provider": "openai", "backend": "api"})
    );
    assert_eq!(
        (
            &shown["namespaceId"],
            &shown["backendRef"],
            &shown["createdBy"]
        ),
        (&json!("team-b"), &json!(BACKEND_REF), &json!("admin"))
    );
    let (code, text, _) = run_with(
        &db,
        None,
        &["admin", "credential-source", "show", "team-b", "openai"],
    );
    assert_eq!(code, 0);
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains("At:")).collect();
    assert_eq!(
        lines,
        [
            "backendRef: occ-ns-team-b/model-keys/openai",
            "createdBy: admin",
            "disabledBy: -",
            "driverId: gw-1",
            "egress:",
            "  backend: api",
            "  provider: openai",
            "id: openai",
            "kind: model_key",
            "namespaceId: team-b",
            "owner: credential_gateway",
            "state: ready",
        ],
        "{text}"
    );

    let (code, _, stderr) = run_with(
        &db,
        None,
        &[
            "admin",
            "credential-source",
            "disable",
            "team-b",
            "openai",
            "--actor",
            "admin",
        ],
    );
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        ok(
            &db,
            &["admin", "credential-source", "show", "team-b", "openai"]
        )["state"],
        json!("disabled")
    );
    refused(
        Some(&db.url),
        &["admin", "credential-source", "show", "team-b", "nope"],
        1,
        "credential-source show refused: no credential source nope in Namespace team-b",
    );
}
