//! SPEC §13, Data and Admission and CLI: credential sources are Namespace-owned references
//! whose shape PostgreSQL enforces, admitted and disabled (never deleted) by authorized,
//! audited SQL functions, and managed from `occ-worker admin credential-source`.

use crate::cli::{ok, refused};
use crate::kube_e2e::scratch;
use crate::support::LoggedOutput;
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
    let out = cmd
        .logged_output("credential_sources.occ-worker")
        .expect("run occ-worker");
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

// ---- Deployment with sources (SPEC §13, Admission and CLI; E19's admission side) ----

/// `team_b` with the Agent `bot`, the Configuration `cfg`, the Secret `key`, and sources of
/// the Credential Gateway `gw-1`: `openai` (model key, with egress), `github` and `git-hub`
/// and `git_hub` (tools), `other-gw` (a model key of `gw-2`), `proxied` (a proxy's model key),
/// `off` (a disabled model key) and `spare` (a tool no revision admits). The Agent's id.
fn deployable() -> (TestDb, String) {
    let db = team_b();
    let mut c = db.client();
    let agent: Value = crate::support::one(
        &mut c,
        "SELECT occ.agent_create('team-b', 'bot', 'admin')",
        &[],
    );
    c.execute(
        "SELECT occ.configuration_put('team-b', 'cfg', '{\"model\": \"m\"}', 'admin')",
        &[],
    )
    .unwrap();
    c.execute(
        "SELECT occ.secret_create('team-b', 'key', 'team-b/keys/api', 'admin')",
        &[],
    )
    .unwrap();
    let source = |id: &str, kind: &str, owner: &str, driver: &str, egress: Option<Value>| {
        db.client()
            .execute(
                "SELECT occ.credential_source_create('team-b', $1, $2, $3, $4, $5, $6, 'admin')",
                &[&id, &kind, &BACKEND_REF, &owner, &driver, &egress],
            )
            .unwrap();
    };
    let gw = "credential_gateway";
    source(
        "openai",
        "model_key",
        gw,
        "gw-1",
        Some(json!({"provider": "openai", "backend": "api"})),
    );
    source("github", "tool", gw, "gw-1", None);
    source("git-hub", "tool", gw, "gw-1", None);
    source("git_hub", "tool", gw, "gw-1", None);
    source("spare", "tool", gw, "gw-1", None);
    source("other-gw", "model_key", gw, "gw-2", None);
    source("proxied", "model_key", "credential_proxy", "px-1", None);
    source("off", "model_key", gw, "gw-1", None);
    disable(&db, "off", "admin").unwrap();
    (db, agent["id"].as_str().unwrap().to_string())
}

/// `occ.agent_deploy` of `bot` as `actor` with the harness source `harness` (the Secret `key`
/// when none), the tool sources `tools` and the selected gateway `gateway`.
fn deploy(
    db: &TestDb,
    actor: &str,
    harness: Option<&str>,
    tools: &[&str],
    gateway: Option<&str>,
) -> Result<Value, postgres::Error> {
    let secret = harness.is_none().then_some("key");
    let tools: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
    db.client()
        .query_one(
            "SELECT occ.agent_deploy('team-b', 'bot', $1, 'cfg', 'codex', 'dedicated', $2,
                 'kubernetes', 'kubernetes', p_credential_source => $3, p_tool_sources => $4,
                 p_credential_gateway_id => $5)",
            &[&actor, &secret, &harness, &tools, &gateway],
        )
        .map(|row| row.get(0))
}

/// Row counts of everything an admission writes: revisions, work, withdrawals, audits.
fn written(db: &TestDb) -> (i64, i64, i64, i64) {
    let row = db
        .client()
        .query_one(
            "SELECT (SELECT count(*) FROM occ.agent_revisions), (SELECT count(*) FROM occ.work),
                    (SELECT count(*) FROM occ.credential_withdrawals),
                    (SELECT count(*) FROM occ.audit_events)",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

#[test]
fn e19_deploy_with_sources_snapshots_them_and_the_harness_auth() {
    let (db, _) = deployable();
    let admitted = deploy(
        &db,
        "admin",
        Some("openai"),
        &["github", "git-hub"],
        Some("gw-1"),
    )
    .unwrap();
    let row = db
        .client()
        .query_one(
            "SELECT harness_auth, credential_sources FROM occ.agent_revisions WHERE id = $1",
            &[&admitted["revisionId"].as_str().unwrap()],
        )
        .unwrap();
    let (auth, sources): (Value, Value) = (row.get(0), row.get(1));
    assert_eq!(
        auth,
        json!({"method": "credential_source", "sourceId": "openai", "credentialGatewayId": "gw-1"})
    );
    let tool = |id: &str| {
        json!({"sourceId": id, "credentialGatewayId": "gw-1", "kind": "tool", "driverId": "gw-1",
               "backendRef": BACKEND_REF})
    };
    let expected = json!([
        {"sourceId": "openai", "credentialGatewayId": "gw-1", "kind": "model_key",
         "driverId": "gw-1", "backendRef": BACKEND_REF,
         "egress": {"provider": "openai", "backend": "api"}},
        tool("github"),
        tool("git-hub"),
    ]);
    assert_eq!(sources, expected);
    assert_eq!(admitted["credentialSources"], expected);
    let details = crate::support::audit_details(&mut db.client(), "openclaw.agents.deploy.admit");
    assert_eq!(
        (&details["harnessAuth"], &details["credentialSourceIds"]),
        (
            &json!("credential_source"),
            &json!(["openai", "github", "git-hub"])
        )
    );

    // Tool sources beside a Secret harness auth; no sources, no snapshot and no gateway needed.
    let with_secret = deploy(&db, "admin", None, &["github"], Some("gw-1")).unwrap();
    assert_eq!(with_secret["credentialSources"], json!([tool("github")]));
    let plain = deploy(&db, "admin", None, &[], None).unwrap();
    assert_eq!(plain["credentialSources"], json!([]));
}

/// (actor, harness source, tool sources, gateway, SQLSTATE, message start).
type DeployCase<'a> = (
    &'a str,
    Option<&'a str>,
    &'a [&'a str],
    Option<&'a str>,
    &'a str,
    &'a str,
);

#[test]
fn e19_deploy_refusals_name_the_rule_and_write_nothing() {
    let (db, agent) = deployable();
    // `dep` may deploy the Agent, read its Configuration and operate `openai`, nothing else.
    grant(
        &db,
        "dep",
        "agent-operator",
        &format!("agent:team-b/{agent}"),
    );
    ok(
        &db,
        &[
            "admin",
            "grant",
            "dep",
            "agent-operator",
            "--scope",
            "credential_source:team-b/openai",
            "--actor",
            "admin",
        ],
    );
    db.client()
        .execute(
            "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id,
                                           resource_kind, resource_id)
             VALUES ('dep', 'agent-operator', 'resource', 'team-b', 'configuration', 'cfg')",
            &[],
        )
        .unwrap();
    deploy(&db, "dep", Some("openai"), &[], Some("gw-1")).expect("dep may use openai");
    let before = written(&db);
    let cases: [DeployCase; 12] = [
        ("admin", Some("openai"), &[], None, "22023",
         "credential sources need a selected Credential Gateway, and none is selected (credentialGateway in the OCC_INSTALLATION_CONFIG file)"),
        ("admin", None, &["github"], None, "22023",
         "credential sources need a selected Credential Gateway, and none is selected (credentialGateway in the OCC_INSTALLATION_CONFIG file)"),
        ("admin", Some("off"), &[], Some("gw-1"), "55000",
         "credential source off in Namespace team-b is disabled (by admin at "),
        ("admin", Some("other-gw"), &[], Some("gw-1"), "55000",
         "credential source other-gw in Namespace team-b belongs to Credential Gateway gw-2, not the selected gw-1"),
        ("admin", Some("openai"), &[], Some("gw-2"), "55000",
         "credential source openai in Namespace team-b belongs to Credential Gateway gw-1, not the selected gw-2"),
        ("admin", Some("proxied"), &[], Some("gw-1"), "55000",
         "credential source proxied in Namespace team-b is owned by Credential Proxy px-1, and no Credential Proxy is built in"),
        ("admin", Some("github"), &[], Some("gw-1"), "22023",
         "credential source github in Namespace team-b is a tool source, not a model_key source (--credential-source names the harness model key)"),
        ("admin", Some("openai"), &["openai"], Some("gw-1"), "22023",
         "credential source openai is named more than once"),
        ("admin", None, &["git-hub", "github", "git_hub"], Some("gw-1"), "22023",
         "tool sources git-hub and git_hub share the environment name OCC_CREDENTIAL_GIT_HUB"),
        ("admin", Some("nope"), &[], Some("gw-1"), "P0002",
         "credential source nope in Namespace team-b does not exist"),
        ("dep", Some("openai"), &["github"], Some("gw-1"), "42501",
         "dep may not operate credential_source: NO_MATCHING_BINDING (needs operate credential_source on credential_source github in Namespace team-b)"),
        ("admin", None, &["openai"], Some("gw-1"), "22023",
         "credential source openai in Namespace team-b is a model_key source, not a tool source (--tool-source names a tool credential)"),
    ];
    for (i, (actor, harness, tools, gateway, code, said)) in cases.into_iter().enumerate() {
        let e = deploy(&db, actor, harness, tools, gateway).expect_err(&format!("case {i}"));
        let d = e.as_db_error().expect("a database error");
        assert_eq!(d.code().code(), code, "case {i}: {}", d.message());
        assert!(d.message().starts_with(said), "case {i}: {}", d.message());
        assert_eq!(written(&db), before, "case {i} wrote something");
    }
    // Exactly one harness auth: a Secret and a source together are refused too.
    let both = db.client().query_one(
        "SELECT occ.agent_deploy('team-b', 'bot', 'admin', 'cfg', 'codex', 'dedicated', 'key',
             'kubernetes', 'kubernetes', p_credential_source => 'openai',
             p_credential_gateway_id => 'gw-1')",
        &[],
    );
    assert_eq!(
        message(both.unwrap_err()),
        "a deployment needs exactly one harness auth: a harness Secret, a service account, a credential source or the runtime's own"
    );
    assert_eq!(written(&db), before);
}

// ---- PostgreSQL refuses malformed snapshots, harness auth and withdrawal work (SPEC §12) ----

/// Inserts revision 1 of the Agent `ag1` (inserted past admission) with `auth` and `sources`.
fn insert_revision(
    db: &TestDb,
    auth: Option<Value>,
    sources: Value,
) -> Result<u64, postgres::Error> {
    db.client().execute(
        "INSERT INTO occ.agent_revisions (id, namespace_id, agent_id, revision, actor_id,
             service_principal_id, configuration_id, configuration_generation, document,
             harness_id, harness_version, harness_mode, execution_mode, compute_id,
             compute_implementation, harness_auth, credential_sources)
         VALUES ('ag1-r1', 'team-b', 'ag1', 1, 'admin', 'ag1-sp', 'cfg', 1, '{}', 'codex',
             '1.0.0', 'dedicated', 'dedicated', 'kubernetes', 'kubernetes', $1, $2)",
        &[&auth, &sources],
    )
}

#[test]
fn e_data_postgres_refuses_malformed_snapshots_and_harness_auth() {
    let db = team_b();
    crate::support::insert_agent(&mut db.client(), "team-b", "ag1", 0);
    let src = |id: &str, kind: &str| {
        json!({"sourceId": id, "credentialGatewayId": "gw-1", "kind": kind, "driverId": "gw-1",
               "backendRef": BACKEND_REF})
    };
    let harness = json!({"method": "credential_source", "sourceId": "openai",
                         "credentialGatewayId": "gw-1"});
    let with = |base: Value, key: &str, value: Value| {
        let mut v = base;
        v[key] = value;
        v
    };
    let without = |base: Value, key: &str| {
        let mut v = base;
        v.as_object_mut().unwrap().remove(key);
        v
    };
    let snapshot = "agent_revisions_credential_sources_check";
    let auth = "agent_revisions_harness_auth_check";
    let cases = [
        (None, json!({}), snapshot),
        (None, json!([1]), snapshot),
        (
            None,
            json!([without(src("a", "tool"), "sourceId")]),
            snapshot,
        ),
        (
            None,
            json!([with(src("A", "tool"), "sourceId", json!("A"))]),
            snapshot,
        ),
        (
            None,
            json!([with(src("a", "tool"), "credentialProxyId", json!("px"))]),
            snapshot,
        ),
        (
            None,
            json!([without(src("a", "tool"), "credentialGatewayId")]),
            snapshot,
        ),
        (
            None,
            json!([with(src("a", "tool"), "credentialGatewayId", json!(" "))]),
            snapshot,
        ),
        (None, json!([src("a", "api_key")]), snapshot),
        (
            None,
            json!([with(src("a", "tool"), "extra", json!(1))]),
            snapshot,
        ),
        (
            None,
            json!([with(src("a", "tool"), "backendRef", json!("keys/openai"))]),
            snapshot,
        ),
        (
            None,
            json!([with(src("a", "tool"), "driverId", json!(""))]),
            snapshot,
        ),
        (
            None,
            json!([with(src("a", "tool"), "egress", json!("openai"))]),
            snapshot,
        ),
        (None, json!([src("a", "tool"), src("a", "tool")]), snapshot),
        // The harness source must be a model key of the snapshot with the same gateway.
        (Some(harness.clone()), json!([]), snapshot),
        (
            Some(harness.clone()),
            json!([src("openai", "tool")]),
            snapshot,
        ),
        (
            Some(harness.clone()),
            json!([with(
                src("openai", "model_key"),
                "credentialGatewayId",
                json!("gw-2")
            )]),
            snapshot,
        ),
        (
            Some(with(harness.clone(), "extra", json!(1))),
            json!([src("openai", "model_key")]),
            auth,
        ),
        // (CHECKs run in name order: each snapshot below passes its own.)
        (
            Some(with(harness.clone(), "sourceId", json!(7))),
            json!([src("7", "model_key")]),
            auth,
        ),
        (
            Some(with(harness.clone(), "credentialGatewayId", json!(5))),
            json!([with(
                src("openai", "model_key"),
                "credentialGatewayId",
                json!("5")
            )]),
            auth,
        ),
    ];
    for (i, (harness_auth, sources, constraint)) in cases.into_iter().enumerate() {
        assert_eq!(
            violated(insert_revision(&db, harness_auth, sources)),
            constraint,
            "case {i}"
        );
    }
    // An unknown method is refused by the revision guard first (no Secret source), as before.
    let unknown = insert_revision(
        &db,
        Some(json!({"method": "credential_proxy", "sourceId": "openai"})),
        json!([]),
    )
    .unwrap_err();
    assert_eq!(
        unknown.as_db_error().map(|d| d.code().code()),
        Some("23514")
    );
    insert_revision(
        &db,
        Some(harness),
        json!([
            src("openai", "model_key"),
            with(
                src("github", "tool"),
                "egress",
                json!({"provider": "p", "backend": "b"})
            ),
            without(
                with(src("proxied", "tool"), "credentialProxyId", json!("px-1")),
                "credentialGatewayId"
            ),
        ]),
    )
    .expect("a well-formed snapshot");
}

#[test]
fn e_data_postgres_refuses_every_other_shape_and_key_of_withdrawal_work() {
    let db = team_b();
    crate::support::insert_agent(&mut db.client(), "team-b", "ag1", 2);
    let insert_as = |key: &str,
                     agent: Option<&str>,
                     revision: Option<&str>,
                     target: Option<&str>,
                     ns_target: Option<&str>| {
        db.client().execute(
            "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id,
                                   agent_target, namespace_target, actor_id)
             VALUES ($1, 'team-b', $2, $3, $4, $5, 'admin')",
            &[&key, &agent, &revision, &target, &ns_target],
        )
    };
    let insert = |key: &str, revision: Option<&str>, target: Option<&str>| {
        insert_as(key, Some("ag1"), revision, target, None)
    };
    let uuid = "0b6f1e7a-3c1d-4e2f-9a8b-7c6d5e4f3a2b";
    let key = |rev: &str, op: &str| format!("agent_revision:{rev}:credential_withdrawal:{op}");
    let cw = Some("credential_withdrawal");
    let r1 = Some("ag1-r1");
    let shapes = [
        insert_as(&key("ag1-r1", uuid), Some("ag1"), r1, cw, Some("ready")),
        insert_as(&key("ag1-r1", uuid), None, r1, cw, None),
    ];
    for (i, result) in shapes.into_iter().enumerate() {
        assert_eq!(violated(result), "work_shape", "shape {i}");
    }
    // Without a revision no withdrawal key can be right (the key rule is checked first).
    assert_eq!(violated(insert(&key("ag1-r1", uuid), None, cw)), "work_key");
    let keys = [
        key("ag1-r1", "other"),
        key("ag1-r1", &uuid.to_uppercase()),
        key("ag1-r1", &uuid[..35]),
        key("ag1-r1", "activation:recovery:0"),
        key("ag1-r1", "activation:recovery:16"),
        key("ag1-r1", &format!("{uuid}:recovery:")),
        key("ag1-r1", &format!("{uuid}:retry:1")),
        key("ag1-r2", uuid),
        format!("agent:ag1:credential_withdrawal:{uuid}"),
        format!("agent_revision:ag1-r1:reconcile:{uuid}"),
        "agent_revision:ag1-r1:reconcile".to_string(),
    ];
    for k in &keys {
        assert_eq!(violated(insert(k, r1, cw)), "work_key", "{k}");
    }
    // A revision work may not take a withdrawal key either.
    assert_eq!(violated(insert(&key("ag1-r1", uuid), r1, None)), "work_key");
    for op in [
        "activation".to_string(),
        "retirement".to_string(),
        uuid.to_string(),
        format!("{uuid}:recovery:1"),
        "retirement:recovery:15".to_string(),
    ] {
        insert(&key("ag1-r1", &op), r1, cw).expect(&op);
    }
    let operations: Vec<String> = db
        .client()
        .query(
            "SELECT DISTINCT operation FROM occ.work WHERE agent_target = 'credential_withdrawal'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(operations, ["agent_credential_withdrawal"]);

    // The withdrawal rows: states, attempt and revocation stamps, and their revision.
    let row = |state: &str, reason: Option<&str>, at: bool, revoked: bool, agent: &str| {
        db.client().execute(
            "INSERT INTO occ.credential_withdrawals (namespace_id, agent_id, revision_id,
                 source_id, state, requested_by, last_reason, last_at, revoked_at)
             VALUES ('team-b', $1, 'ag1-r1', 'openai', $2, 'admin', $3,
                 CASE WHEN $4 THEN now() END, CASE WHEN $5 THEN now() END)",
            &[&agent, &state, &reason, &at, &revoked],
        )
    };
    let cases = [
        (
            row("gone", None, false, false, "ag1"),
            "credential_withdrawals_state_check",
        ),
        (
            row("revoked", None, false, false, "ag1"),
            "credential_withdrawals_revoked_check",
        ),
        (
            row("pending", None, false, true, "ag1"),
            "credential_withdrawals_revoked_check",
        ),
        (
            row("pending", Some("X"), false, false, "ag1"),
            "credential_withdrawals_attempt_check",
        ),
        (
            row("pending", None, true, false, "ag1"),
            "credential_withdrawals_attempt_check",
        ),
        (
            row("pending", Some("lower"), true, false, "ag1"),
            "credential_withdrawals_last_reason_check",
        ),
        (
            row("pending", None, false, false, "ag2"),
            "credential_withdrawals_revision_id_agent_id_namespace_id_fkey",
        ),
    ];
    for (i, (result, constraint)) in cases.into_iter().enumerate() {
        assert_eq!(violated(result), constraint, "row {i}");
    }
    row("revoked", Some("CREDENTIALS_WITHDRAWN"), true, true, "ag1").expect("a revoked row");
}

// ---- Runtime holders (E14) and the withdrawal request (E15) ----

/// The revision id of an admitted deployment.
fn revision(admitted: Value) -> String {
    admitted["revisionId"].as_str().unwrap().to_string()
}

/// Ends `revision`'s reconcile work and makes it the Agent's active revision, as a pass that
/// activated it would.
fn activate(db: &TestDb, agent: &str, revision: &str) {
    let mut c = db.client();
    c.execute(
        "UPDATE occ.work SET state = 'succeeded', reason_code = 'REVISION_ACTIVE',
             completed_at = clock_timestamp()
         WHERE idempotency_key = 'agent_revision:' || $1 || ':reconcile'",
        &[&revision],
    )
    .unwrap();
    c.execute(
        "UPDATE occ.agents SET active_revision_id = $2 WHERE id = $1",
        &[&agent, &revision],
    )
    .unwrap();
}

fn holders(db: &TestDb, agent: &str) -> Vec<String> {
    let mut ids: Vec<String> = db
        .client()
        .query("SELECT occ.runtime_holders($1)", &[&agent])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    ids.sort();
    ids
}

#[test]
fn e14_runtime_holders_are_the_active_a_newer_pending_or_failed_and_an_older_unretired() {
    let db = team_b();
    let mut c = db.client();
    crate::support::insert_agent(&mut c, "team-b", "ag1", 5);
    let work = |n: u32, state: &str| {
        let (reason, done) = match state {
            "queued" => (None, false),
            "succeeded" => (Some("REVISION_ACTIVE"), true),
            _ => (Some("REVISION_FAILED"), true),
        };
        db.client()
            .execute(
                "INSERT INTO occ.work (idempotency_key, namespace_id, agent_id, revision_id,
                     actor_id, state, reason_code, completed_at)
                 VALUES ('agent_revision:ag1-r' || $1 || ':reconcile', 'team-b', 'ag1',
                     'ag1-r' || $1, 'admin', $2, $3,
                     CASE WHEN $4 THEN clock_timestamp() END)",
                &[&n.to_string(), &state, &reason, &done],
            )
            .unwrap();
    };
    let set = |sql: &str| {
        db.client().batch_execute(sql).unwrap();
    };
    work(1, "succeeded");
    work(2, "failed_permanent");
    work(3, "queued");
    work(4, "queued");
    // None active: the newest revision in flight and the newest failed one kept for diagnosis.
    assert_eq!(holders(&db, "ag1"), ["ag1-r2", "ag1-r4"]);
    set(
        "UPDATE occ.work SET state = 'succeeded', reason_code = 'REVISION_ACTIVE',
             completed_at = now() WHERE idempotency_key = 'agent_revision:ag1-r3:reconcile';
         UPDATE occ.agents SET active_revision_id = 'ag1-r3' WHERE id = 'ag1'",
    );
    // The active one, the newer one in flight, the newest older one not retired.
    assert_eq!(holders(&db, "ag1"), ["ag1-r2", "ag1-r3", "ag1-r4"]);
    set("UPDATE occ.agent_revisions SET retired_at = now() WHERE id = 'ag1-r2'");
    assert_eq!(holders(&db, "ag1"), ["ag1-r1", "ag1-r3", "ag1-r4"]);
    set("UPDATE occ.agent_revisions SET retired_at = now() WHERE id = 'ag1-r1'");
    assert_eq!(holders(&db, "ag1"), ["ag1-r3", "ag1-r4"]);
    // A newer failed deployment holds its runtime until it is retired.
    work(5, "failed_permanent");
    assert_eq!(holders(&db, "ag1"), ["ag1-r3", "ag1-r4", "ag1-r5"]);
    set("UPDATE occ.agent_revisions SET retired_at = now() WHERE id = 'ag1-r5'");
    assert_eq!(holders(&db, "ag1"), ["ag1-r3", "ag1-r4"]);
    // A newer revision whose work ended without activating it holds nothing.
    set(
        "UPDATE occ.work SET state = 'succeeded', reason_code = 'REVISION_SUPERSEDED',
             completed_at = now() WHERE idempotency_key = 'agent_revision:ag1-r4:reconcile'",
    );
    assert_eq!(holders(&db, "ag1"), ["ag1-r3"]);
    drop(c);
}

fn request(db: &TestDb, actor: &str, source: &str) -> Result<Value, postgres::Error> {
    db.client()
        .query_one(
            "SELECT occ.credential_withdrawal_request($1, 'team-b', 'bot', $2)",
            &[&actor, &source],
        )
        .map(|row| row.get(0))
}

/// (revision, state, requested_by) of each withdrawal row, by revision number.
fn rows(db: &TestDb) -> Vec<(String, String, String)> {
    db.client()
        .query(
            "SELECT w.revision_id, w.state, w.requested_by FROM occ.credential_withdrawals w
             JOIN occ.agent_revisions r ON r.id = w.revision_id ORDER BY r.revision, w.source_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// (key, revision, actor) of each withdrawal work, in the order they were queued.
fn withdrawal_works(db: &TestDb) -> Vec<(String, String, String)> {
    db.client()
        .query(
            "SELECT idempotency_key, revision_id, actor_id FROM occ.work
             WHERE agent_target = 'credential_withdrawal' ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[test]
fn e15_request_writes_a_row_per_holder_and_one_work_per_revision_without_outstanding_work() {
    let (db, agent) = deployable();
    let r1 = revision(deploy(&db, "admin", Some("openai"), &["github"], Some("gw-1")).unwrap());
    activate(&db, &agent, &r1);
    let r2 = revision(deploy(&db, "admin", Some("openai"), &["github"], Some("gw-1")).unwrap());
    grant(
        &db,
        "op2",
        "agent-operator",
        &format!("agent:team-b/{agent}"),
    );
    let pending = |rev: &str, by: &str| (rev.to_string(), "pending".to_string(), by.to_string());

    let first = request(&db, "admin", "github").unwrap();
    let works = withdrawal_works(&db);
    assert_eq!(works.len(), 2);
    for ((key, rev, actor), expected) in works.iter().zip([&r1, &r2]) {
        assert!(
            key.starts_with(&format!("agent_revision:{expected}:credential_withdrawal:")),
            "{key}"
        );
        assert_eq!((rev, actor.as_str()), (expected, "admin"));
    }
    assert_eq!(
        first,
        json!({"agentId": agent, "sourceId": "github", "revisions": [r1, r2],
               "works": [works[0].0, works[1].0]})
    );
    assert_eq!(rows(&db), [pending(&r1, "admin"), pending(&r2, "admin")]);

    // Another operator takes the pending rows over; the outstanding works stay the only ones.
    let second = request(&db, "op2", "github").unwrap();
    assert_eq!(second["works"], json!([]));
    assert_eq!(rows(&db), [pending(&r1, "op2"), pending(&r2, "op2")]);
    assert_eq!(withdrawal_works(&db), works);

    // r1's row was revoked and every work ended: r1 stays revoked and gets no work.
    db.client()
        .batch_execute(&format!(
            "UPDATE occ.credential_withdrawals SET state = 'revoked', revoked_at = now(),
                 last_reason = 'CREDENTIALS_WITHDRAWN', last_at = now()
             WHERE revision_id = '{r1}';
             UPDATE occ.work SET state = 'succeeded', reason_code = 'CREDENTIALS_WITHDRAWN',
                 completed_at = now() WHERE agent_target = 'credential_withdrawal'"
        ))
        .unwrap();
    let third = request(&db, "admin", "github").unwrap();
    assert_eq!(third["revisions"], json!([r1, r2]));
    let now = withdrawal_works(&db);
    assert_eq!(now.len(), 3);
    assert_eq!((&now[2].1, now[2].2.as_str()), (&r2, "admin"));
    assert_eq!(third["works"], json!([now[2].0]));
    assert_eq!(
        rows(&db),
        [
            (r1.clone(), "revoked".to_string(), "op2".to_string()),
            pending(&r2, "admin")
        ]
    );

    let audited: Vec<(String, String, String, Value)> = db
        .client()
        .query(
            "SELECT actor_id, resource_kind, resource_id, details FROM occ.audit_events
             WHERE action = 'openclaw.agents.credentials_withdraw.admit' ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let actors: Vec<&str> = audited.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(actors, ["admin", "op2", "admin"]);
    assert!(audited
        .iter()
        .all(|a| (a.1.as_str(), a.2.as_str()) == ("agent", agent.as_str())));
    assert_eq!(
        audited[0].3,
        json!({"sourceId": "github", "revisionIds": [r1, r2],
               "works": [works[0].0, works[1].0]})
    );
}

#[test]
fn e15_request_refusals_write_nothing() {
    let (db, agent) = deployable();
    let r1 = revision(deploy(&db, "admin", Some("openai"), &["github"], Some("gw-1")).unwrap());
    activate(&db, &agent, &r1);
    let r2 = revision(deploy(&db, "admin", Some("openai"), &[], Some("gw-1")).unwrap());
    activate(&db, &agent, &r2);
    grant(&db, "watcher", "viewer", "namespace:team-b");
    let refused_with = |actor: &str, source: &str, code: &str, said: &str| {
        let before = written(&db);
        let e = request(&db, actor, source).expect_err(source);
        let d = e.as_db_error().expect("a database error");
        assert_eq!((d.code().code(), d.message()), (code, said));
        assert_eq!(written(&db), before, "{source}");
    };
    refused_with(
        "watcher",
        "github",
        "42501",
        &format!("watcher may not operate agent: NO_MATCHING_BINDING (needs operate agent on agent {agent} in Namespace team-b)"),
    );
    refused_with(
        "admin",
        "nope",
        "P0002",
        "credential source nope in Namespace team-b does not exist",
    );
    refused_with(
        "admin",
        "spare",
        "55000",
        &format!("no revision of agent team-b/{agent} that may hold a runtime admitted credential source spare"),
    );
    // r1, the newest older revision not retired, still holds github until it is retired.
    db.client()
        .execute(
            "UPDATE occ.agent_revisions SET retired_at = now() WHERE id = $1",
            &[&r1],
        )
        .unwrap();
    refused_with(
        "admin",
        "github",
        "55000",
        &format!("no revision of agent team-b/{agent} that may hold a runtime admitted credential source github"),
    );
    db.client()
        .execute(
            "UPDATE occ.agents SET status = 'deleting', desired_runtime_state = 'stopped'
             WHERE id = $1",
            &[&agent],
        )
        .unwrap();
    refused_with(
        "admin",
        "openai",
        "55000",
        &format!("agent team-b/{agent} is being deleted"),
    );
}

#[test]
fn e15_cli_deploys_with_sources_withdraws_and_lists_withdrawals() {
    let (db, agent) = deployable();
    let config = scratch("credential-withdrawal-cli").join("installation.json");
    std::fs::write(
        &config,
        json!({
            "sandbox": {"id": "sbx", "implementation": "kubernetes-sandbox", "facets": ["read-only-root"]},
            "credentialGateway": {"id": "gw-1", "implementation": "kubernetes-secret-gateway"},
        })
        .to_string(),
    )
    .unwrap();
    let deploy_args = crate::support::deploy_args(
        "team-b",
        "bot",
        "cfg",
        &[
            "--credential-source",
            "openai",
            "--tool-source",
            "github",
            "--compute-id",
            "kubernetes",
            "--actor",
            "admin",
            "--json",
        ],
    );
    assert_eq!(
        run_with(&db, None, &deploy_args),
        (2, String::new(), "occ-worker: agent deploy refused: credential sources need a selected Credential Gateway, and none is selected (credentialGateway in the OCC_INSTALLATION_CONFIG file)\n".into())
    );
    let mut both = deploy_args.to_vec();
    both.extend(["--harness-secret", "key"]);
    assert_eq!(run_with(&db, Some(&config), &both).0, 2);
    let (code, stdout, stderr) = run_with(&db, Some(&config), &deploy_args);
    assert_eq!((code, stderr.as_str()), (0, ""));
    let admitted: Value = serde_json::from_str(&stdout).unwrap();
    let rev = revision(admitted.clone());
    assert_eq!(
        admitted["credentialSources"][1]["sourceId"],
        json!("github")
    );

    let (_, none, _) = run_with(&db, None, &["admin", "withdrawal", "list", "team-b"]);
    assert_eq!(none.lines().nth(1), Some("(none)"));

    let withdraw = |source: &str| {
        run_with(
            &db,
            None,
            &[
                "admin",
                "agent",
                "withdraw-credential",
                "team-b",
                "bot",
                source,
                "--actor",
                "admin",
                "--json",
            ],
        )
    };
    assert_eq!(
        withdraw("spare"),
        (1, String::new(), format!("occ-worker: agent withdraw-credential refused: no revision of agent team-b/{agent} that may hold a runtime admitted credential source spare\n"))
    );
    let (code, stdout, stderr) = withdraw("github");
    assert_eq!((code, stderr.as_str()), (0, ""));
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (
            &answer["agentId"],
            &answer["sourceId"],
            &answer["revisions"]
        ),
        (&json!(agent), &json!("github"), &json!([rev]))
    );
    assert_eq!(answer["works"].as_array().unwrap().len(), 1);

    let (code, table, stderr) = run_with(&db, None, &["admin", "withdrawal", "list", "team-b"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        table.lines().collect::<Vec<_>>(),
        [
            "AGENT  REVISION  SOURCE  STATE    REQUESTED BY  LAST REASON  LAST AT  REVOKED AT",
            "bot    1         github  pending  admin         -            -        -",
        ]
    );
    let listed = ok(&db, &["admin", "withdrawal", "list", "team-b", "bot"]);
    let row = &listed[0];
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(
        (
            &row["agentId"],
            &row["revisionId"],
            &row["revision"],
            &row["sourceId"],
            &row["state"],
            &row["requestedBy"],
            &row["lastReason"],
            &row["revokedAt"],
        ),
        (
            &json!(agent),
            &json!(rev),
            &json!(1),
            &json!("github"),
            &json!("pending"),
            &json!("admin"),
            &Value::Null,
            &Value::Null
        )
    );
    assert!(row["requestedAt"].as_str().unwrap().ends_with('Z'));
    // An attempt's code and time, in UTC.
    db.client()
        .execute(
            "UPDATE occ.credential_withdrawals SET last_reason = 'AUTHORIZATION_DENIED',
                 last_at = '2026-01-31T12:00:00Z'",
            &[],
        )
        .unwrap();
    let (_, table, _) = run_with(&db, None, &["admin", "withdrawal", "list", "team-b", "bot"]);
    assert_eq!(
        table.lines().nth(1),
        Some("bot    1         github  pending  admin         AUTHORIZATION_DENIED  2026-01-31T12:00:00.000Z  -")
    );

    // --wait follows the one work queued; with no worker running it times out (exit 4).
    let wait_openai = || {
        run_with(
            &db,
            None,
            &[
                "admin",
                "agent",
                "withdraw-credential",
                "team-b",
                "bot",
                "openai",
                "--actor",
                "admin",
                "--wait=1s",
            ],
        )
    };
    let (code, _, stderr) = wait_openai();
    assert_eq!(
        (code, stderr.as_str()),
        (0, "agent withdraw-credential: queued no work to wait for: each revision's withdrawal work was already queued (the row gets its own work when that one ends), or its row is revoked (admin withdrawal list, admin work list --agent bot)\n")
    );
    db.client()
        .execute(
            "UPDATE occ.work SET state = 'succeeded', reason_code = 'CREDENTIALS_WITHDRAWN',
                 completed_at = now() WHERE agent_target = 'credential_withdrawal'",
            &[],
        )
        .unwrap();
    let (code, _, stderr) = run_with(
        &db,
        None,
        &[
            "admin",
            "agent",
            "withdraw-credential",
            "team-b",
            "bot",
            "openai",
            "--actor",
            "admin",
            "--wait=1s",
        ],
    );
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains(":credential_withdrawal:"), "{stderr}");
    assert!(stderr.contains("withdrawing"), "{stderr}");

    // An unknown Agent is an error, never an empty list.
    refused(
        Some(&db.url),
        &["admin", "withdrawal", "list", "team-b", "nope"],
        1,
        "withdrawal list refused: no Agent nope in Namespace team-b",
    );
}

#[test]
fn e15_cli_refusals_name_the_source_and_the_agent_as_typed() {
    let db = TestDb::bootstrapped();
    db.client()
        .batch_execute(
            "INSERT INTO occ.namespaces_all (id, name, status, created_by)
             VALUES ('ns-1a2b3c4d', 'team-c', 'ready', 'admin');
             SELECT occ.agent_create('team-c', 'bot', 'admin')",
        )
        .unwrap();
    let agent: String = db
        .client()
        .query_one("SELECT id FROM occ.agents WHERE name = 'bot'", &[])
        .unwrap()
        .get(0);
    let withdraw = |source: &str| {
        run_with(
            &db,
            None,
            &[
                "admin",
                "agent",
                "withdraw-credential",
                "team-c",
                "bot",
                source,
                "--actor",
                "admin",
            ],
        )
    };
    assert_eq!(
        withdraw("nope"),
        (1, String::new(), "occ-worker: agent withdraw-credential refused: credential source nope in Namespace team-c (ns-1a2b3c4d) does not exist\n".into())
    );
    db.client()
        .execute(
            "SELECT occ.credential_source_create('team-c', 'spare', 'tool', $1,
                 'credential_gateway', 'gw-1', NULL, 'admin')",
            &[&BACKEND_REF],
        )
        .unwrap();
    assert_eq!(
        withdraw("spare"),
        (1, String::new(), format!("occ-worker: agent withdraw-credential refused: no revision of agent bot ({agent}) in Namespace team-c (ns-1a2b3c4d) that may hold a runtime admitted credential source spare\n"))
    );
}
