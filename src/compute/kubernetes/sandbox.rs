//! The built-in Sandbox Driver `kubernetes-sandbox` (SPEC §15) as pure functions: how each
//! pinned facet shows in a workload (S2), and the egress NetworkPolicy of an Agent's sandbox
//! policy (S3). The driver reads and writes; this module only builds and checks objects, and
//! never talks to anything.

use super::manifests::{self, agent_labels, stamp, POD_SECURITY};
use super::names::{self, LABEL_AGENT};
use crate::compute::sandbox::{EgressRule, Sandbox};
use crate::compute::spec::Facet;
use crate::compute::{AgentSpec, ComputeError};
use serde_json::{json, Value};

/// The code of a pinned facet the driver cannot enforce (SPEC S2, R9).
pub const FACET_UNAVAILABLE: &str = "SANDBOX_FACET_UNAVAILABLE";

/// The annotation carrying the policy generation a NetworkPolicy was written for (SPEC S3).
pub const POLICY_GENERATION: &str = "occ.sandbox-policy-generation";

pub fn facet_unavailable() -> ComputeError {
    ComputeError::permanent(FACET_UNAVAILABLE, "kubernetes_sandbox", None)
}

/// Every pinned facet is one the driver's Sandbox Driver offers (a revision pinned to a facet
/// the Installation no longer selects cannot be enforced).
pub fn offered(pinned: &[Facet], sandbox: Option<&Sandbox>) -> Result<(), ComputeError> {
    let offers = |facet: &Facet| sandbox.is_some_and(|s| s.facets.contains(facet));
    if pinned.iter().all(offers) {
        Ok(())
    } else {
        Err(facet_unavailable())
    }
}

/// Whether `namespace` enforces the restricted Pod Security level (`pod-security-restricted`).
pub fn namespace_restricted(namespace: &Value) -> bool {
    namespace["metadata"]["labels"][POD_SECURITY] == "restricted"
}

/// `deployment` with the pinned facets applied that the manifest does not always carry: the
/// Sandbox Driver's RuntimeClass when `runtime-class` is pinned; stamped again.
pub fn apply(deployment: Value, pinned: &[Facet], sandbox: Option<&Sandbox>) -> Value {
    let runtime_class = sandbox
        .and_then(|s| s.runtime_class_name.as_deref())
        .filter(|_| pinned.contains(&Facet::RuntimeClass));
    let Some(runtime_class) = runtime_class else {
        return deployment;
    };
    let mut deployment = deployment;
    if let Some(annotations) = deployment["metadata"]
        .as_object_mut()
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        annotations.remove(manifests::SPEC_HASH);
    }
    deployment["spec"]["template"]["spec"]["runtimeClassName"] = json!(runtime_class);
    stamp(deployment)
}

/// Whether a workload Deployment enforces every pinned facet its manifest carries (SPEC S2
/// table): no automounted token and only the audience-scoped projected token, a read-only root
/// on every container (init containers included), the configured RuntimeClass. The namespace's facets are read apart.
pub fn workload_enforces(deployment: &Value, pinned: &[Facet], sandbox: Option<&Sandbox>) -> bool {
    let pod = &deployment["spec"]["template"]["spec"];
    // Init containers count as containers: a workspace setup is hardened too (SPEC WS3).
    let containers: Vec<Value> = ["initContainers", "containers"]
        .iter()
        .filter_map(|field| pod[*field].as_array())
        .flatten()
        .cloned()
        .collect();
    pinned.iter().all(|facet| match facet {
        Facet::NoServiceAccountToken => {
            pod["automountServiceAccountToken"] == false
                && pod["volumes"].as_array().into_iter().flatten().all(|v| {
                    v["projected"]["sources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|s| {
                            s.get("serviceAccountToken").is_none_or(|t| {
                                t["audience"].as_str().is_some_and(|a| !a.is_empty())
                            })
                        })
                })
        }
        Facet::ReadOnlyRoot => {
            pod["containers"].as_array().is_some_and(|c| !c.is_empty())
                && containers
                    .iter()
                    .all(|c| c["securityContext"]["readOnlyRootFilesystem"] == true)
        }
        Facet::RuntimeClass => sandbox
            .and_then(|s| s.runtime_class_name.as_deref())
            .is_some_and(|name| pod["runtimeClassName"] == name),
        // Read from the namespace and its NetworkPolicies, not the workload.
        Facet::PodSecurityRestricted | Facet::DefaultDenyEgress => true,
    })
}

/// The name of an Agent's egress NetworkPolicy: `occ-egress-<agent>`.
pub fn egress_policy_name(agent_id: &str) -> String {
    names::dns_label(&format!("occ-egress-{agent_id}"))
}

/// The NetworkPolicy allowing an Agent's Pods egress to each entry's network on its TCP ports
/// (SPEC S3), owned like the Agent's other objects and annotated with the policy generation.
pub fn egress_policy(
    agent: &AgentSpec,
    namespace: &str,
    generation: i32,
    egress: &[EgressRule],
) -> Value {
    let rules: Vec<Value> = egress
        .iter()
        .map(|rule| {
            json!({
                "to": [{"ipBlock": {"cidr": rule.cidr}}],
                "ports": rule.ports.iter()
                    .map(|p| json!({"protocol": "TCP", "port": p}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    stamp(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": egress_policy_name(&agent.agent_id),
            "namespace": namespace,
            "labels": agent_labels(agent),
            "annotations": {POLICY_GENERATION: generation.to_string()},
        },
        "spec": {
            "podSelector": {"matchLabels": {LABEL_AGENT: names::label_value(&agent.agent_id)}},
            "policyTypes": ["Egress"],
            "egress": rules,
        },
    }))
}
