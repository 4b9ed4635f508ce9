//! Unit tests of the manifests: the objects the driver writes, field by field.

use super::*;
use crate::compute::{RepositoryAccess, RepositoryBinding, RepositoryMaterial};

pub fn settings() -> Settings {
    Settings::parse(
        r#"{"tenantRoleBinding":"occ-tenant","tokenAudience":"occ-agent","harnesses":[
            {"id":"codex","version":"1.0.0","mode":"dedicated","image":"registry/codex:1"}],
            "gatewayImage":"registry/gateway:1"}"#,
    )
    .unwrap()
}

fn revision() -> RevisionSpec {
    RevisionSpec {
        installation_id: "inst".into(),
        namespace_id: "ns1".into(),
        agent_id: "ag-1".into(),
        revision_id: "rev-1".into(),
        revision: 1,
        service_principal_id: "sp-1".into(),
        harness_id: "codex".into(),
        harness_version: "1.0.0".into(),
        harness_mode: HarnessMode::Dedicated,
        execution_mode: "dedicated".into(),
        document: json!({"model": "gpt"}),
        harness_auth: Some(
            json!({"method": "secret", "source": {"namespaceId": "ns1", "id": "key"}}),
        ),
        secret_bindings: json!({"TOKEN": {"namespaceId": "ns1", "id": "tok"}}),
        secrets: vec![SecretProjection {
            binding: "TOKEN".into(),
            id: "tok".into(),
            backend_ref: "occ-ns1/tok/value".into(),
            driver_id: Some("occ-secrets".into()),
            uid: Some("u1".into()),
        }],
        harness_secret: Some(SecretProjection {
            binding: "harnessAuth".into(),
            id: "key".into(),
            backend_ref: "occ-ns1/openai/api-key".into(),
            driver_id: Some("occ-secrets".into()),
            uid: Some("u2".into()),
        }),
        managed_account: None,
        backend_id: None,
        plugin_ids: vec![],
        execution_admission: crate::compute::ExecutionAdmission::standard(),
        sandbox_facets: Vec::new(),
        credential_sources: Vec::new(),
        workspace_setup: None,
        sandbox_driver_id: None,
        repository: None,
    }
}

#[test]
fn a_managed_account_mounts_its_access_token_by_reference() {
    let mut r = revision();
    let auth = json!({"method": "service_account",
        "source": {"namespaceId": "ns1", "id": "acct"},
        "credential": {"kind": "access_token", "secretRef": {"name": "chatgpt", "key": "token"}},
        "backendBinding": {"backendId": "b1", "driverId": "d1", "workspaceId": "ws-1",
                           "credentialIssued": true}});
    r.harness_secret = None;
    r.managed_account = ManagedAccountAuth::from_harness_auth(&auth);
    r.harness_auth = Some(auth);
    let d = workload(
        &r,
        "occ-ns1",
        "img",
        &LaunchValues::default(),
        &settings(),
        960,
    )
    .unwrap();
    let env = d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap();
    let token = env
        .iter()
        .find(|e| e["name"] == "OCC_HARNESS_ACCESS_TOKEN")
        .unwrap();
    assert_eq!(
        token,
        &json!({"name": "OCC_HARNESS_ACCESS_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "chatgpt", "key": "token"}}})
    );
    assert!(env.iter().all(|e| e["name"] != "OCC_HARNESS_API_KEY"));
    // A legacy snapshot without its credential never reaches a workload.
    r.managed_account.as_mut().unwrap().credential = None;
    assert!(workload(
        &r,
        "occ-ns1",
        "img",
        &LaunchValues::default(),
        &settings(),
        960
    )
    .is_err());
}

#[test]
fn workloads_are_hardened_and_reference_secrets_only() {
    let d = workload(
        &revision(),
        "occ-ns1",
        "registry/codex:1",
        &LaunchValues::default(),
        &settings(),
        960,
    )
    .unwrap();
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &pod["containers"][0]["securityContext"];
    assert_eq!(c["readOnlyRootFilesystem"], true);
    assert_eq!(c["allowPrivilegeEscalation"], false);
    assert_eq!(c["capabilities"]["drop"], json!(["ALL"]));
    assert!(c["runAsUser"].as_i64().unwrap() > 0);
    let env = pod["containers"][0]["env"].as_array().unwrap();
    let token = env.iter().find(|e| e["name"] == "TOKEN").unwrap();
    assert_eq!(
        token["valueFrom"]["secretKeyRef"],
        json!({"name": "tok", "key": "value"})
    );
    assert!(token.get("value").is_none());
    let projected = &pod["volumes"][1]["projected"]["sources"][0]["serviceAccountToken"];
    assert_eq!(projected["audience"], "occ-agent");
    assert!(projected["expirationSeconds"].as_u64().unwrap() >= 600);
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    assert!(stamped(&d).is_some());
}

#[test]
fn a_secret_outside_the_agents_namespace_is_refused() {
    let mut r = revision();
    r.secrets[0].backend_ref = "kube-system/tok/value".into();
    let e = workload(
        &r,
        "occ-ns1",
        "img",
        &LaunchValues::default(),
        &settings(),
        960,
    )
    .unwrap_err();
    assert_eq!(
        e.kind(),
        &crate::compute::ComputeErrorKind::Permanent("SECRET_REFERENCE_OUTSIDE_NAMESPACE".into())
    );
}

fn attachment(id: &str, harness: bool, backend_ref: &str) -> CredentialAttachment {
    CredentialAttachment {
        source_id: id.into(),
        kind: if harness { "model_key" } else { "tool" }.into(),
        harness,
        backend_ref: backend_ref.into(),
    }
}

fn env_of(d: &Value) -> Vec<Value> {
    d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone()
}

// SPEC §13, Kubernetes attachment: the harness source as OCC_HARNESS_API_KEY, a tool source
// as OCC_CREDENTIAL_<ID>, each a secretKeyRef; the stamp follows the source list.
#[test]
fn credential_sources_are_attached_as_secret_key_refs_and_change_the_stamp() {
    let mut r = revision();
    r.harness_secret = None;
    let before = workload(
        &r,
        "occ-ns1",
        "img",
        &LaunchValues::default(),
        &settings(),
        960,
    )
    .unwrap();
    r.credential_sources = vec![
        attachment("openai", true, "occ-ns1/openai/api-key"),
        attachment("gh-tool", false, "occ-ns1/github/token"),
    ];
    let d = workload(
        &r,
        "occ-ns1",
        "img",
        &LaunchValues::default(),
        &settings(),
        960,
    )
    .unwrap();
    let env = env_of(&d);
    assert!(env.contains(&json!({"name": "OCC_HARNESS_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "openai", "key": "api-key"}}})));
    assert!(env.contains(&json!({"name": "OCC_CREDENTIAL_GH_TOOL",
        "valueFrom": {"secretKeyRef": {"name": "github", "key": "token"}}})));
    assert_ne!(stamped(&d), stamped(&before));
    assert!(carries_env(
        &d["spec"]["template"]["spec"],
        "OCC_CREDENTIAL_GH_TOOL"
    ));
    // Detaching one keeps the other and drops the stamp.
    let detached = without_env(d, "OCC_CREDENTIAL_GH_TOOL");
    let spec = &detached["spec"]["template"]["spec"];
    assert!(!carries_env(spec, "OCC_CREDENTIAL_GH_TOOL"));
    assert!(carries_env(spec, "OCC_HARNESS_API_KEY"));
    assert!(carries_env(spec, "TOKEN"));
    assert!(stamped(&detached).is_none());
}

#[test]
fn a_credential_source_outside_the_agents_namespace_is_refused() {
    let mut r = revision();
    r.credential_sources = vec![attachment("gh", false, "kube-system/github/token")];
    let refused = |r: &RevisionSpec| {
        let e = workload(
            r,
            "occ-ns1",
            "img",
            &LaunchValues::default(),
            &settings(),
            960,
        )
        .unwrap_err();
        assert_eq!(
            e.kind(),
            &crate::compute::ComputeErrorKind::Permanent(
                "SECRET_REFERENCE_OUTSIDE_NAMESPACE".into()
            )
        );
    };
    refused(&r);
    assert!(credential_sources_hold(&r, "occ-ns1").is_err());
    r.credential_sources[0].backend_ref = "occ-ns1/github".into();
    refused(&r);
    r.credential_sources[0].backend_ref = "occ-ns1/github/token".into();
    assert!(credential_sources_hold(&r, "occ-ns1").is_ok());
}

// The API server's proxied `/readyz` read reaches the harness port from the configured
// networks only; without them the policy denies every ingress, stamped as before.
#[test]
fn the_default_deny_admits_the_api_server_to_the_harness_port_only_when_configured() {
    let spec = NamespaceSpec {
        installation_id: "inst".into(),
        namespace_id: "ns1".into(),
        name: "n".into(),
        existing_namespace: None,
    };
    let closed = default_deny(&spec, "occ-ns1", &[]);
    assert_eq!(closed["spec"]["ingress"], json!([]));
    let cidrs = vec!["10.0.0.0/8".to_string(), "fd00::/64".to_string()];
    let open = default_deny(&spec, "occ-ns1", &cidrs);
    assert_eq!(
        open["spec"]["ingress"],
        json!([{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}, {"ipBlock": {"cidr": "fd00::/64"}}],
                "ports": [{"protocol": "TCP", "port": 8080}]}])
    );
    assert_eq!(open["spec"]["egress"], closed["spec"]["egress"]);
    assert_ne!(stamped(&open), stamped(&closed));
}

#[test]
fn ownership_needs_both_labels() {
    let ns = namespace(
        &NamespaceSpec {
            installation_id: "inst".into(),
            namespace_id: "ns1".into(),
            name: "n".into(),
            existing_namespace: None,
        },
        "occ-ns1",
    );
    assert!(owned(&ns, "inst"));
    assert!(!owned(&ns, "other"));
    assert!(!owned(&json!({"metadata": {}}), "inst"));
}

#[test]
fn g11_each_session_material_reaches_the_harness_by_reference_in_binding_order() {
    let material = |r: &str, s: &str, name: &str| RepositoryMaterial {
        repository_ref: r.into(),
        session_id: s.into(),
        secret_name: name.into(),
        key: "token".into(),
    };
    let mut r = revision();
    let binding = |r: &str| RepositoryBinding {
        repository_ref: r.into(),
        scope: "read".into(),
    };
    r.repository = Some(RepositoryAccess {
        sender_id: "git".into(),
        bindings: vec![
            binding("github.com/acme/app"),
            binding("github.com/acme/lib"),
        ],
        standing: false,
        materials: Vec::new(),
    });
    let env_of = |r: &RevisionSpec| {
        let w = workload(
            r,
            "occ-ns1",
            "img",
            &LaunchValues::default(),
            &settings(),
            960,
        )
        .unwrap();
        w["spec"]["template"]["spec"]["containers"][0]["env"].clone()
    };
    // Before the sessions are prepared nothing is carried.
    let before = env_of(&r);
    assert!(!before.to_string().contains("OCC_GIT_"), "{before}");
    r.repository.as_mut().unwrap().materials = vec![
        material("github.com/acme/app", "s-1", "git-app"),
        material("github.com/acme/lib", "s-2", "git-lib"),
    ];
    let env = env_of(&r);
    let find = |name: &str| {
        env.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {env}"))
    };
    assert_eq!(find("OCC_GIT_REPOSITORY_1")["value"], "github.com/acme/app");
    assert_eq!(
        find("OCC_GIT_CREDENTIAL_1")["valueFrom"],
        json!({"secretKeyRef": {"name": "git-app", "key": "token"}})
    );
    assert_eq!(find("OCC_GIT_REPOSITORY_2")["value"], "github.com/acme/lib");
    assert_eq!(
        find("OCC_GIT_CREDENTIAL_2")["valueFrom"],
        json!({"secretKeyRef": {"name": "git-lib", "key": "token"}})
    );
    let w = workload(
        &r,
        "occ-ns1",
        "img",
        &LaunchValues::default(),
        &settings(),
        960,
    )
    .unwrap();
    assert!(carries_git_material(&w["spec"]["template"]["spec"]));
    assert!(!carries_git_material(
        &without_env(
            without_env(w, "OCC_GIT_CREDENTIAL_1"),
            "OCC_GIT_CREDENTIAL_2"
        )["spec"]["template"]["spec"]
    ));
}
