//! The objects the Kubernetes driver creates, built from specs and settings: the tenant
//! namespace and its default-deny NetworkPolicy, the Agent's ServiceAccount, Service and
//! Harness claim, and hardened workload Deployments.
//!
//! Pure functions: no requests. Every object carries the ownership labels; workloads run
//! non-root with a read-only root filesystem, no privilege escalation, every capability
//! dropped, the RuntimeDefault seccomp profile and no automounted token. Secret values never
//! appear here: a Secret reaches a workload only as a `secretKeyRef`.

use super::names::{
    self, LABEL_AGENT, LABEL_COMPONENT, LABEL_INSTALLATION, LABEL_MANAGED_BY, LABEL_NAMESPACE,
    LABEL_REVISION, MANAGED_BY,
};
use super::observe::{HARNESS_CONTAINER, WORKSPACE_SETUP_CONTAINER};
use super::settings::Settings;
use crate::compute::hooks::LaunchValues;
use crate::compute::HarnessMode;
use crate::compute::{
    AgentSpec, ComputeError, CredentialAttachment, ManagedAccountAuth, NamespaceSpec, RevisionSpec,
    SecretProjection,
};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// The annotation holding the hash of what the driver last wrote, so an unchanged object is
/// never rewritten.
pub const SPEC_HASH: &str = "occ.spec-hash";
/// The pod-security level every namespace the driver creates enforces.
pub const POD_SECURITY: &str = "pod-security.kubernetes.io/enforce";
/// The Agent Service's selector value while no revision is routed.
pub const NO_REVISION: &str = "none";
/// The default-deny NetworkPolicy's name.
pub const DEFAULT_DENY: &str = "occ-default-deny";
/// The port every harness and gateway listens on (harness image contract).
pub const HARNESS_PORT: u16 = 8080;
/// The port of the Agent Service and of a dedicated revision's Harness Service.
pub const SERVICE_PORT: u16 = 80;
/// The `LABEL_COMPONENT` of a dedicated Harness's Pods.
pub const COMPONENT_HARNESS: &str = "harness";
/// The `LABEL_COMPONENT` of the Agent's gateway Pods (an embedded harness runs inside it).
pub const COMPONENT_GATEWAY: &str = "gateway";
/// The dedicated gateway's container name.
pub const GATEWAY_CONTAINER: &str = "gateway";
/// Where the audience-scoped projected token is mounted.
pub const TOKEN_DIR: &str = "/var/run/secrets/occ";
/// The largest admitted document passed to a workload.
pub const DOCUMENT_LIMIT: usize = 256 * 1024;

/// The ownership labels of every object of one installation and Namespace.
pub fn base_labels(installation_id: &str, namespace_id: &str) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
    labels.insert(
        LABEL_INSTALLATION.into(),
        names::label_value(installation_id).into(),
    );
    labels.insert(
        LABEL_NAMESPACE.into(),
        names::label_value(namespace_id).into(),
    );
    labels
}

/// The labels of an Agent's objects.
pub fn agent_labels(agent: &AgentSpec) -> Map<String, Value> {
    let mut labels = base_labels(&agent.installation_id, &agent.namespace_id);
    labels.insert(
        LABEL_AGENT.into(),
        names::label_value(&agent.agent_id).into(),
    );
    labels
}

/// The labels of a revision's objects and Pods: the Agent Service selects the gateway Pods
/// of the routed revision (agent, revision, component).
pub fn revision_labels(revision: &RevisionSpec, component: &str) -> Map<String, Value> {
    let mut labels = agent_labels(&agent_of(revision));
    labels.insert(
        LABEL_REVISION.into(),
        names::label_value(&revision.revision_id).into(),
    );
    labels.insert(LABEL_COMPONENT.into(), component.into());
    labels
}

/// The Agent a revision belongs to.
pub fn agent_of(revision: &RevisionSpec) -> AgentSpec {
    AgentSpec {
        installation_id: revision.installation_id.clone(),
        namespace_id: revision.namespace_id.clone(),
        agent_id: revision.agent_id.clone(),
        service_principal_id: revision.service_principal_id.clone(),
    }
}

/// Whether an object carries this installation's ownership labels: the driver never
/// modifies or deletes one that does not.
pub fn owned(object: &Value, installation_id: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    labels[LABEL_MANAGED_BY] == MANAGED_BY
        && labels[LABEL_INSTALLATION].as_str() == Some(names::label_value(installation_id).as_str())
}

/// Stamps `object` with the hash of its content (labels, spec) under `SPEC_HASH`.
pub fn stamp(mut object: Value) -> Value {
    let digest = Sha256::digest(object.to_string().as_bytes());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    object["metadata"]["annotations"][SPEC_HASH] = hash.into();
    object
}

/// The hash an object was stamped with.
pub fn stamped(object: &Value) -> Option<&str> {
    object["metadata"]["annotations"][SPEC_HASH].as_str()
}

/// A namespace the driver creates.
pub fn namespace(spec: &NamespaceSpec, name: &str) -> Value {
    let mut labels = base_labels(&spec.installation_id, &spec.namespace_id);
    labels.insert(POD_SECURITY.into(), "restricted".into());
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

/// The labels added to an adopted namespace (SPEC C3: labels only).
pub fn adoption_labels(spec: &NamespaceSpec) -> Value {
    Value::Object(base_labels(&spec.installation_id, &spec.namespace_id))
}

/// Default deny for ingress and egress, except DNS to the cluster's resolver (UDP and TCP
/// 53 to `kube-system` Pods labelled `k8s-app=kube-dns`), which every runtime needs to name
/// anything at all, and, when the driver file names the API server's networks
/// (`apiServerCidrs`), TCP to the harness port from those networks only: the API server's
/// proxied read of a held failure's `/readyz` (SPEC C3, R5).
pub fn default_deny(spec: &NamespaceSpec, namespace: &str, api_server_cidrs: &[String]) -> Value {
    let ingress: Vec<Value> = if api_server_cidrs.is_empty() {
        Vec::new()
    } else {
        vec![json!({
            "from": api_server_cidrs
                .iter()
                .map(|cidr| json!({"ipBlock": {"cidr": cidr}}))
                .collect::<Vec<_>>(),
            "ports": [{"protocol": "TCP", "port": HARNESS_PORT}],
        })]
    };
    stamp(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": DEFAULT_DENY,
            "namespace": namespace,
            "labels": base_labels(&spec.installation_id, &spec.namespace_id),
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": [{
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            }],
        },
    }))
}

/// The Agent's dedicated ServiceAccount, named for the Agent and annotated with its service
/// principal; it never automounts a token.
pub fn service_account(agent: &AgentSpec, namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": names::agent_object_name(&agent.agent_id),
            "namespace": namespace,
            "labels": agent_labels(agent),
            "annotations": {"occ.service-principal": agent.service_principal_id},
        },
        "automountServiceAccountToken": false,
    })
}

/// The Agent Service, created routing no revision.
pub fn service(agent: &AgentSpec, namespace: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names::agent_object_name(&agent.agent_id),
            "namespace": namespace,
            "labels": agent_labels(agent),
        },
        "spec": {
            "selector": route_selector(agent, None),
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    })
}

/// The Agent Service's selector: the Agent's gateway Pods of `revision`, or none. A dedicated
/// Harness sits behind the gateway; an embedded one runs inside it.
pub fn route_selector(agent: &AgentSpec, revision: Option<&str>) -> Value {
    json!({
        LABEL_AGENT: names::label_value(&agent.agent_id),
        LABEL_REVISION: revision.map_or(NO_REVISION.to_string(), names::label_value),
        LABEL_COMPONENT: COMPONENT_GATEWAY,
    })
}

/// The Harness-only ReadWriteOnce claim of a dedicated Agent, reused by each of its revisions.
pub fn harness_claim(agent: &AgentSpec, namespace: &str, settings: &Settings) -> Value {
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.harness_claim.size}},
    });
    if let Some(class) = &settings.harness_claim.storage_class_name {
        spec["storageClassName"] = class.clone().into();
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": harness_claim_name(&agent.agent_id),
            "namespace": namespace,
            "labels": agent_labels(agent),
        },
        "spec": spec,
    })
}

pub fn harness_claim_name(agent_id: &str) -> String {
    names::agent_object_name(&format!("{agent_id}-harness"))
}

/// The Agent's shared single-replica gateway Deployment: it runs an embedded revision, or
/// fronts a dedicated revision's Harness. Every workload uses the Recreate strategy (the
/// dedicated Harness claim is ReadWriteOnce; the gateway is one per Agent).
pub fn gateway_name(agent_id: &str) -> String {
    names::agent_object_name(&format!("{agent_id}-gateway"))
}

/// The Deployment controller's own deadline when the driver is told none: the worker's default
/// convergence deadline (900 s) and a minute.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: u64 = 960;

/// The revision's Harness Deployment (dedicated) or the Agent's gateway running the revision
/// (embedded). Its `progressDeadlineSeconds` is past the worker's convergence deadline, so
/// Kubernetes never gives up on a rollout the worker still waits for.
pub fn workload(
    revision: &RevisionSpec,
    namespace: &str,
    image: &str,
    launch: &LaunchValues,
    settings: &Settings,
    progress_deadline_seconds: u64,
) -> Result<Value, ComputeError> {
    let dedicated = revision.harness_mode == HarnessMode::Dedicated;
    let (name, component) = if dedicated {
        (
            names::revision_object_name(&revision.agent_id, revision.revision),
            COMPONENT_HARNESS,
        )
    } else {
        (gateway_name(&revision.agent_id), COMPONENT_GATEWAY)
    };
    let mut volumes = vec![
        json!({"name": "tmp", "emptyDir": {}}),
        json!({"name": "occ-token", "projected": {"sources": [{"serviceAccountToken": {
            "audience": settings.token_audience,
            "expirationSeconds": settings.token_expiration_seconds,
            "path": "token",
        }}]}}),
    ];
    let mut mounts = vec![
        json!({"name": "tmp", "mountPath": "/tmp"}),
        json!({"name": "occ-token", "mountPath": TOKEN_DIR, "readOnly": true}),
    ];
    if dedicated {
        volumes.push(json!({"name": "harness", "persistentVolumeClaim": {
            "claimName": harness_claim_name(&revision.agent_id)}}));
        mounts.push(json!({"name": "harness", "mountPath": "/var/lib/harness"}));
    }
    let init = workspace_setup_container(revision, &mounts, settings);
    let container = container(
        HARNESS_CONTAINER,
        image,
        env(revision, namespace, launch)?,
        mounts,
        settings,
    );
    Ok(deployment(
        revision,
        &name,
        namespace,
        component,
        (init, container),
        volumes,
        settings,
        progress_deadline_seconds,
    ))
}

/// The init container that runs the Agent's workspace setup on the dedicated Harness claim
/// before the Harness starts (SPEC WS3): `workspaceSetupImage` with the claim at
/// `/var/lib/harness`, the setup's id and document in its environment, hardened like the
/// Harness. The template carries the id and the document, never whether the setup completed,
/// so a completion rolls nothing out and a new put (a new id) rolls the next preparation.
/// `None` without a setup, for an embedded revision, or without the image (the worker refuses
/// those before any Compute call, SPEC WS2).
fn workspace_setup_container(
    revision: &RevisionSpec,
    mounts: &[Value],
    settings: &Settings,
) -> Option<Value> {
    let setup = revision.workspace_setup.as_ref()?;
    let image = settings.workspace_setup_image.as_deref()?;
    if revision.harness_mode != HarnessMode::Dedicated {
        return None;
    }
    let env = vec![
        json!({"name": "OCC_WORKSPACE_SETUP_ID", "value": setup.id}),
        json!({"name": "OCC_WORKSPACE_SETUP", "value": setup.document.to_string()}),
    ];
    let mut init = container(
        WORKSPACE_SETUP_CONTAINER,
        image,
        env,
        mounts.to_vec(),
        settings,
    );
    if let Some(fields) = init.as_object_mut() {
        // An init container serves nothing and has no readiness.
        fields.remove("ports");
        fields.remove("readinessProbe");
    }
    init["args"] = json!(["workspace-setup"]);
    Some(init)
}

/// The Agent's shared single-replica gateway in front of a dedicated revision's Harness (SPEC
/// C3): it reaches the Harness through the revision's Harness Service and is what the Agent
/// Service routes. It carries no Secret and no token; its Pods carry the revision's label, so
/// a stop of the revision waits for them too.
pub fn dedicated_gateway(
    revision: &RevisionSpec,
    namespace: &str,
    image: &str,
    settings: &Settings,
    progress_deadline_seconds: u64,
) -> Value {
    let upstream = format!(
        "http://{}:{}",
        names::revision_object_name(&revision.agent_id, revision.revision),
        SERVICE_PORT
    );
    let env = vec![
        json!({"name": "OCC_NAMESPACE_ID", "value": revision.namespace_id}),
        json!({"name": "OCC_AGENT_ID", "value": revision.agent_id}),
        json!({"name": "OCC_REVISION_ID", "value": revision.revision_id}),
        json!({"name": "OCC_UPSTREAM_URL", "value": upstream}),
    ];
    let container = container(
        GATEWAY_CONTAINER,
        image,
        env,
        vec![json!({"name": "tmp", "mountPath": "/tmp"})],
        settings,
    );
    deployment(
        revision,
        &gateway_name(&revision.agent_id),
        namespace,
        COMPONENT_GATEWAY,
        (None, container),
        vec![json!({"name": "tmp", "emptyDir": {}})],
        settings,
        progress_deadline_seconds,
    )
}

/// The Service in front of a dedicated revision's Harness Pods, the gateway's upstream.
pub fn harness_service(revision: &RevisionSpec, namespace: &str) -> Value {
    let mut selector = Map::new();
    let labels = revision_labels(revision, COMPONENT_HARNESS);
    for key in [LABEL_AGENT, LABEL_REVISION, LABEL_COMPONENT] {
        selector.insert(key.into(), labels[key].clone());
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names::revision_object_name(&revision.agent_id, revision.revision),
            "namespace": namespace,
            "labels": revision_labels(revision, COMPONENT_HARNESS),
        },
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    })
}

/// The Agent's own exception to the namespace's default deny: its gateway Pods may reach its
/// Harness Pods on the harness port, and nothing else is opened.
pub fn agent_network_policy(agent: &AgentSpec, namespace: &str) -> Value {
    let agent_label = names::label_value(&agent.agent_id);
    let gateway = json!({"podSelector": {"matchLabels": {
        LABEL_AGENT: agent_label, LABEL_COMPONENT: COMPONENT_GATEWAY}}});
    let harness = json!({"podSelector": {"matchLabels": {
        LABEL_AGENT: agent_label, LABEL_COMPONENT: COMPONENT_HARNESS}}});
    let port = json!([{"protocol": "TCP", "port": HARNESS_PORT}]);
    stamp(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names::agent_object_name(&agent.agent_id),
            "namespace": namespace,
            "labels": agent_labels(agent),
        },
        "spec": {
            "podSelector": {"matchLabels": {LABEL_AGENT: agent_label}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [gateway], "ports": port}],
            "egress": [{"to": [harness], "ports": port}],
        },
    }))
}

/// A hardened container: non-root, read-only root, no privilege escalation, every capability
/// dropped, RuntimeDefault seccomp; ready once `/readyz` on the harness port answers.
fn container(
    name: &str,
    image: &str,
    env: Vec<Value>,
    mounts: Vec<Value>,
    settings: &Settings,
) -> Value {
    json!({
        "name": name,
        "image": image,
        "env": env,
        "ports": [{"name": "http", "containerPort": HARNESS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5},
        "resources": {
            "requests": {"cpu": settings.resources.requests.cpu, "memory": settings.resources.requests.memory},
            "limits": {"cpu": settings.resources.limits.cpu, "memory": settings.resources.limits.memory},
        },
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": settings.run_as_user,
            "readOnlyRootFilesystem": true,
            "allowPrivilegeEscalation": false,
            "privileged": false,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": mounts,
    })
}

/// A single-replica Recreate Deployment of one component of the Agent, running as the Agent's
/// ServiceAccount without a mounted API token. A Harness Deployment selects its revision's
/// Pods; the gateway selects the Agent's gateway Pods whatever revision they run.
#[allow(clippy::too_many_arguments)]
fn deployment(
    revision: &RevisionSpec,
    name: &str,
    namespace: &str,
    component: &str,
    (init, container): (Option<Value>, Value),
    volumes: Vec<Value>,
    settings: &Settings,
    progress_deadline_seconds: u64,
) -> Value {
    let labels = revision_labels(revision, component);
    let mut selector = Map::new();
    selector.insert(LABEL_AGENT.into(), labels[LABEL_AGENT].clone());
    selector.insert(LABEL_COMPONENT.into(), component.into());
    if component == COMPONENT_HARNESS {
        selector.insert(LABEL_REVISION.into(), labels[LABEL_REVISION].clone());
    }
    let user = settings.run_as_user;
    let mut deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels.clone()},
        "spec": {
            "replicas": 1,
            "progressDeadlineSeconds": progress_deadline_seconds,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": names::agent_object_name(&revision.agent_id),
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": user,
                        "runAsGroup": user,
                        "fsGroup": user,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    });
    if let Some(init) = init {
        deployment["spec"]["template"]["spec"]["initContainers"] = json!([init]);
    }
    stamp(deployment)
}

/// The harness's environment: identifiers, the admitted document, and every Secret as a
/// `secretKeyRef` into the Agent's own namespace.
/// The workload's environment: the driver's own `OCC_` values, each Secret binding as a
/// `secretKeyRef`, each credential source as a `secretKeyRef` (SPEC §13), and the hooks' launch values (`opaque-` placeholders, SPEC H5) as plain values.
fn env(
    revision: &RevisionSpec,
    namespace: &str,
    launch: &LaunchValues,
) -> Result<Vec<Value>, ComputeError> {
    let document = revision.document.to_string();
    if document.len() > DOCUMENT_LIMIT {
        return Err(ComputeError::permanent(
            "REVISION_DOCUMENT_TOO_LARGE",
            "kubernetes",
            None,
        ));
    }
    let mut env = vec![
        json!({"name": "OCC_NAMESPACE_ID", "value": revision.namespace_id}),
        json!({"name": "OCC_AGENT_ID", "value": revision.agent_id}),
        json!({"name": "OCC_REVISION_ID", "value": revision.revision_id}),
        json!({"name": "OCC_HARNESS_ID", "value": revision.harness_id}),
        json!({"name": "OCC_HARNESS_VERSION", "value": revision.harness_version}),
        json!({"name": "OCC_HARNESS_MODE", "value": revision.harness_mode}),
        json!({"name": "OCC_TOKEN_FILE", "value": format!("{TOKEN_DIR}/token")}),
        json!({"name": "OCC_AGENT_DOCUMENT", "value": document}),
    ];
    for secret in &revision.secrets {
        if !is_env_name(&secret.binding) || secret.binding.starts_with("OCC_") {
            return Err(ComputeError::permanent(
                "SECRET_BINDING_NAME_INVALID",
                "kubernetes",
                None,
            ));
        }
        env.push(secret_env(&secret.binding, secret, namespace)?);
    }
    if let Some(secret) = &revision.harness_secret {
        env.push(secret_env("OCC_HARNESS_API_KEY", secret, namespace)?);
    }
    if let Some(account) = &revision.managed_account {
        env.extend(managed_account_env(account)?);
    }
    for source in &revision.credential_sources {
        env.push(credential_env(source, namespace)?);
    }
    env.extend(repository_env(revision));
    env.extend(
        launch
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value})),
    );
    Ok(env)
}

/// A managed ChatGPT account (SPEC M3): the access token as a `secretKeyRef` to the admitted
/// `secretRef`, a Secret of the Agent's own namespace (the Pod's), plus the binding's backend
/// and workspace ids. The harness auth arrives as admitted, with no Secret projection; an
/// account without an access token never got past the worker's checks, so it is refused.
fn managed_account_env(account: &ManagedAccountAuth) -> Result<Vec<Value>, ComputeError> {
    let (Some(token), Some(binding)) = (account.access_token(), &account.backend_binding) else {
        return Err(ComputeError::permanent(
            "INVALID_HARNESS_AUTH",
            "kubernetes",
            None,
        ));
    };
    Ok(vec![
        json!({
            "name": "OCC_HARNESS_ACCESS_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}},
        }),
        json!({"name": "OCC_HARNESS_BACKEND_ID", "value": binding.backend_id}),
        json!({"name": "OCC_HARNESS_WORKSPACE_ID", "value": binding.workspace_id}),
    ])
}

/// One Secret as an environment variable; a backend reference outside the Agent's namespace
/// is refused, since a Pod can only reference its own namespace's Secrets.
fn secret_env(
    name: &str,
    secret: &SecretProjection,
    namespace: &str,
) -> Result<Value, ComputeError> {
    secret_key_ref_env(name, &secret.backend_ref, namespace)
}

/// One credential source as its environment variable (SPEC §13, Kubernetes attachment):
/// `OCC_HARNESS_API_KEY` or `OCC_CREDENTIAL_<ID>`, a `secretKeyRef` to its `backend_ref`,
/// which must name the Agent's namespace (`SECRET_REFERENCE_OUTSIDE_NAMESPACE`).
pub fn credential_env(
    source: &CredentialAttachment,
    namespace: &str,
) -> Result<Value, ComputeError> {
    secret_key_ref_env(&source.env_name(), &source.backend_ref, namespace)
}

/// The prefix of the variables carrying Git material (SPEC G11): `OCC_GIT_REPOSITORY_<n>` is
/// the n-th binding's REF, `OCC_GIT_CREDENTIAL_<n>` a `secretKeyRef` to its session's
/// material, a Secret in the Agent's own namespace.
pub const GIT_CREDENTIAL_PREFIX: &str = "OCC_GIT_CREDENTIAL_";

/// SPEC G11: each prepared session's material, numbered from 1 in binding order. Nothing
/// before the sessions are prepared, and nothing once withdrawn (SPEC G14).
fn repository_env(revision: &RevisionSpec) -> Vec<Value> {
    let Some(access) = &revision.repository else {
        return Vec::new();
    };
    access
        .materials
        .iter()
        .enumerate()
        .flat_map(|(i, m)| {
            let n = i + 1;
            [
                json!({"name": format!("OCC_GIT_REPOSITORY_{n}"), "value": m.repository_ref}),
                json!({
                    "name": format!("{GIT_CREDENTIAL_PREFIX}{n}"),
                    "valueFrom": {"secretKeyRef": {"name": m.secret_name, "key": m.key}},
                }),
            ]
        })
        .collect()
}

/// `workload` without any Git variable (`OCC_GIT_REPOSITORY_<n>`, `OCC_GIT_CREDENTIAL_<n>`) in
/// its template (SPEC G14), its spec-hash stamp dropped as `without_env` does.
pub fn without_git(mut workload: Value) -> Value {
    let names: Vec<String> = ["containers", "initContainers"]
        .iter()
        .filter_map(|list| workload["spec"]["template"]["spec"][*list].as_array())
        .flatten()
        .filter_map(|c| c["env"].as_array())
        .flatten()
        .filter_map(|e| e["name"].as_str())
        .filter(|n| n.starts_with("OCC_GIT_"))
        .map(String::from)
        .collect();
    for name in names {
        workload = without_env(workload, &name);
    }
    workload
}

/// Whether a pod spec still carries Git material (SPEC G14): any `OCC_GIT_CREDENTIAL_<n>`.
pub fn carries_git_material(pod_spec: &Value) -> bool {
    ["containers", "initContainers"].iter().any(|list| {
        pod_spec[*list].as_array().is_some_and(|containers| {
            containers.iter().any(|c| {
                c["env"].as_array().is_some_and(|env| {
                    env.iter().any(|e| {
                        e["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with(GIT_CREDENTIAL_PREFIX))
                    })
                })
            })
        })
    })
}

/// Refuses, before anything is written, a revision whose credential sources reference a
/// Secret outside the Agent's namespace (`SECRET_REFERENCE_OUTSIDE_NAMESPACE`).
pub fn credential_sources_hold(
    revision: &RevisionSpec,
    namespace: &str,
) -> Result<(), ComputeError> {
    for source in &revision.credential_sources {
        credential_env(source, namespace)?;
    }
    Ok(())
}

/// Whether a pod spec (a Deployment's or ReplicaSet's template, or a Pod's) has an
/// environment variable `name` in any of its containers.
pub fn carries_env(pod_spec: &Value, name: &str) -> bool {
    ["containers", "initContainers"].iter().any(|list| {
        pod_spec[*list].as_array().is_some_and(|containers| {
            containers.iter().any(|c| {
                c["env"]
                    .as_array()
                    .is_some_and(|env| env.iter().any(|e| e["name"] == name))
            })
        })
    })
}

/// `workload` without the environment variable `name` in any container of its template
/// (SPEC E6): the credential source's `secretKeyRef` is detached, everything else is kept.
/// Its spec-hash stamp is dropped, since the object is no longer what the stamp says, so the
/// next preparation rewrites it from the revision's spec.
pub fn without_env(mut workload: Value, name: &str) -> Value {
    let spec = &mut workload["spec"]["template"]["spec"];
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec[list].as_array_mut() {
            for container in containers {
                if let Some(env) = container["env"].as_array_mut() {
                    env.retain(|e| e["name"] != name);
                }
            }
        }
    }
    if let Some(annotations) = workload["metadata"]["annotations"].as_object_mut() {
        annotations.remove(SPEC_HASH);
    }
    workload
}

/// A `NAMESPACE/NAME/KEY` backend reference as the `secretKeyRef` environment variable `name`;
/// a reference outside `namespace` (or malformed) is refused.
fn secret_key_ref_env(
    name: &str,
    backend_ref: &str,
    namespace: &str,
) -> Result<Value, ComputeError> {
    let parts: Vec<&str> = backend_ref.splitn(3, '/').collect();
    match parts.as_slice() {
        [ns, secret_name, key] if *ns == namespace => Ok(json!({
            "name": name,
            "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}},
        })),
        _ => Err(ComputeError::permanent(
            "SECRET_REFERENCE_OUTSIDE_NAMESPACE",
            "kubernetes",
            None,
        )),
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests;
