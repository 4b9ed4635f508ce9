//! Reading Kubernetes status into the worker's vocabulary: rollout readiness (the
//! `kubectl rollout status` rule), pending reasons from Pods and ReplicaSets, held runtime
//! failures from container termination messages or from a harness that holds itself unready
//! (which Pod to ask, and what its `/readyz` answer means), and EndpointSlice readiness.
//!
//! Everything here is a pure function of API objects and answers, so it is tested without a
//! server. It never copies provider free text into what it returns: a termination message or
//! a `/readyz` body becomes a runtime failure only when it is a bounded code, and a
//! ReplicaSet's quota message is only matched, never kept.

use crate::compute::{is_code, MissingMaterial, RepositoryMaterial, RuntimeFailure};
use serde_json::Value;

/// The harness container's name in every workload the driver creates.
pub const HARNESS_CONTAINER: &str = "harness";

/// The init container that runs an Agent's workspace setup (SPEC WS3).
pub const WORKSPACE_SETUP_CONTAINER: &str = "workspace-setup";

/// The most bytes of a harness's `/readyz` answer read for its held code: a code is at most
/// 64 bytes, and a line end or spaces around it are allowed.
pub const HELD_BODY_LIMIT: u64 = 256;

/// Where a Deployment's rollout stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rollout {
    /// Every replica runs the current template and is available.
    Complete,
    /// Still rolling out.
    Progressing,
    /// The Deployment controller gave up (`ProgressDeadlineExceeded`).
    Failed,
}

fn count(status: &Value, field: &str) -> i64 {
    // The controller omits zero counts.
    status.get(field).and_then(Value::as_i64).unwrap_or(0)
}

/// The rollout rule of `kubectl rollout status`: the observed generation is current, every
/// desired replica is updated, no old replica remains, and every updated one is available;
/// a `Progressing` condition with reason `ProgressDeadlineExceeded` is a failure.
pub fn rollout(deployment: &Value) -> Rollout {
    let generation = deployment["metadata"]["generation"].as_i64().unwrap_or(0);
    let status = &deployment["status"];
    if count(status, "observedGeneration") < generation {
        return Rollout::Progressing;
    }
    let failed = status["conditions"].as_array().is_some_and(|conditions| {
        conditions.iter().any(|c| {
            c["type"] == "Progressing" && c["reason"].as_str() == Some("ProgressDeadlineExceeded")
        })
    });
    if failed {
        return Rollout::Failed;
    }
    let desired = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
    let updated = count(status, "updatedReplicas");
    // A workload scaled to zero serves nothing: never complete.
    if desired < 1
        || updated < desired
        || count(status, "replicas") > updated
        || count(status, "availableReplicas") < updated
    {
        return Rollout::Progressing;
    }
    Rollout::Complete
}

/// Why the Pods of a workload are not ready, in the driver's pending vocabulary, and any
/// held runtime failure their harness container reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFindings {
    pub pending_reason: Option<&'static str>,
    pub runtime_failure: Option<RuntimeFailure>,
}

/// Reads Pods: `Unschedulable` → `WORKLOAD_UNSCHEDULABLE`; `ErrImagePull`,
/// `ImagePullBackOff` or `InvalidImageName` → `WORKLOAD_IMAGE_PULL_FAILED`; a harness
/// container whose termination message is a bounded code reports that code as a runtime
/// failure (the harness image contract's fallback: write the code, and nothing else, to
/// `/dev/termination-log` before exiting; a harness holding unready is read through
/// `held_candidate` and `held_code` instead).
pub fn pods(pods: &[Value]) -> PodFindings {
    let mut findings = PodFindings::default();
    for pod in pods {
        if pod["metadata"].get("deletionTimestamp").is_some() {
            continue;
        }
        let unschedulable = pod["status"]["conditions"]
            .as_array()
            .is_some_and(|conditions| {
                conditions.iter().any(|c| {
                    c["type"] == "PodScheduled"
                        && c["status"] == "False"
                        && c["reason"] == "Unschedulable"
                })
            });
        if unschedulable {
            findings.pending_reason = Some("WORKLOAD_UNSCHEDULABLE");
        }
        workspace_setup(pod, &mut findings);
        // SPEC WS5: init containers are read as containers (an image that cannot be pulled).
        for container in ["initContainerStatuses", "containerStatuses"]
            .iter()
            .filter_map(|field| pod["status"][*field].as_array())
            .flatten()
        {
            let waiting = container["state"]["waiting"]["reason"].as_str();
            if matches!(
                waiting,
                Some("ErrImagePull" | "ImagePullBackOff" | "InvalidImageName")
            ) {
                findings
                    .pending_reason
                    .get_or_insert("WORKLOAD_IMAGE_PULL_FAILED");
            }
            if container["name"] != HARNESS_CONTAINER || findings.runtime_failure.is_some() {
                continue;
            }
            let message = ["state", "lastState"]
                .iter()
                .filter_map(|s| container[*s]["terminated"]["message"].as_str())
                .map(str::trim)
                .find(|m| is_code(m));
            if let Some(code) = message {
                findings.runtime_failure = Some(harness_failure(code, restart_count(container)));
            }
        }
    }
    findings
}

/// SPEC G11: the sessions whose material keeps a container of `pods` waiting
/// `CreateContainerConfigError`: the kubelet names the Secret it could not find
/// (`secret "NAME" not found`) or the key it could not find in it (`couldn't find key KEY in
/// Secret NAMESPACE/NAME`). The message is matched against the materials' names and never
/// kept or logged.
pub fn missing_material(pods: &[Value], materials: &[RepositoryMaterial]) -> Vec<MissingMaterial> {
    let mut missing: Vec<MissingMaterial> = Vec::new();
    let messages = pods
        .iter()
        .filter(|pod| pod["metadata"].get("deletionTimestamp").is_none())
        .flat_map(|pod| {
            ["initContainerStatuses", "containerStatuses"]
                .iter()
                .filter_map(move |field| pod["status"][*field].as_array())
                .flatten()
        })
        .filter(|c| c["state"]["waiting"]["reason"] == "CreateContainerConfigError")
        .filter_map(|c| c["state"]["waiting"]["message"].as_str());
    for message in messages {
        for m in materials {
            let secret_gone = message.contains(&format!("secret \"{}\" not found", m.secret_name));
            let key_gone = message.contains(&format!("couldn't find key {} in Secret ", m.key))
                && message.ends_with(&format!("/{}", m.secret_name));
            let entry = MissingMaterial {
                repository_ref: m.repository_ref.clone(),
                session_id: m.session_id.clone(),
            };
            if (secret_gone || key_gone) && !missing.contains(&entry) {
                missing.push(entry);
            }
        }
    }
    missing
}

/// SPEC WS5: the `workspace-setup` init container terminated with the termination message
/// `WORKSPACE_SETUP_REFUSED` is that held runtime failure (the kubelet restarts it, and it
/// refuses the same way each time); restarting after any other non-zero exit waits as
/// `WORKSPACE_SETUP_RETRYING`.
fn workspace_setup(pod: &Value, findings: &mut PodFindings) {
    let Some(setup) = pod["status"]["initContainerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == WORKSPACE_SETUP_CONTAINER)
    else {
        return;
    };
    let terminated = ["state", "lastState"].map(|s| &setup[s]["terminated"]);
    let refused = terminated
        .iter()
        .filter_map(|t| t["message"].as_str())
        .any(|m| m.trim() == "WORKSPACE_SETUP_REFUSED");
    if refused {
        if findings.runtime_failure.is_none() {
            findings.runtime_failure = Some(RuntimeFailure {
                code: "WORKSPACE_SETUP_REFUSED".to_string(),
                container: Some(WORKSPACE_SETUP_CONTAINER.to_string()),
                restart_count: restart_count(setup),
            });
        }
        return;
    }
    let failed = terminated
        .iter()
        .any(|t| t["exitCode"].as_i64().is_some_and(|code| code != 0));
    if failed && setup["ready"] != true {
        findings
            .pending_reason
            .get_or_insert("WORKSPACE_SETUP_RETRYING");
    }
}

fn restart_count(container: &Value) -> Option<u32> {
    container["restartCount"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
}

/// A runtime failure the harness container reported.
fn harness_failure(code: &str, restart_count: Option<u32>) -> RuntimeFailure {
    RuntimeFailure {
        code: code.to_string(),
        container: Some(HARNESS_CONTAINER.to_string()),
        restart_count,
    }
}

/// A Pod whose harness may hold a failure behind its `/readyz`: the one Pod asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldCandidate {
    pub pod: String,
    pub restart_count: Option<u32>,
}

impl HeldCandidate {
    /// The runtime failure of a held code this Pod's harness answered.
    pub fn failure(&self, code: &str) -> RuntimeFailure {
        harness_failure(code, self.restart_count)
    }
}

/// The first Pod that may hold a failure (SPEC R5, the harness contract: a harness that
/// cannot start stays running and unready): Running, not being deleted, its harness container
/// running but not ready. A Pod still starting, waiting or terminated is not one: its
/// container could not answer, and a terminated one reports through its termination message.
pub fn held_candidate(pods: &[Value]) -> Option<HeldCandidate> {
    pods.iter().find_map(|pod| {
        if pod["metadata"].get("deletionTimestamp").is_some()
            || pod["status"]["phase"].as_str() != Some("Running")
        {
            return None;
        }
        let name = pod["metadata"]["name"].as_str()?;
        let container = pod["status"]["containerStatuses"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == HARNESS_CONTAINER)?;
        let held =
            container["ready"].as_bool() != Some(true) && container["state"]["running"].is_object();
        held.then(|| HeldCandidate {
            pod: name.to_string(),
            restart_count: restart_count(container),
        })
    })
}

/// The held code a harness's `/readyz` answered (the harness contract): a 503 whose body,
/// trimmed, is a bounded code and nothing else. Any other status, a longer body, prose or a
/// `Status` from the API server itself (which could not reach the Pod) is no finding.
pub fn held_code(status: u16, body: &[u8]) -> Option<&str> {
    if status != 503 || body.len() as u64 > HELD_BODY_LIMIT {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?.trim();
    is_code(text).then_some(text)
}

/// Whether a ReplicaSet of the workload cannot create Pods because the namespace's quota is
/// exhausted (`ReplicaFailure` / `FailedCreate` naming a quota). The message is matched,
/// never kept.
pub fn quota_exceeded(replica_sets: &[Value]) -> bool {
    replica_sets.iter().any(|rs| {
        rs["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                c["type"] == "ReplicaFailure"
                    && c["status"] == "True"
                    && c["reason"] == "FailedCreate"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("exceeded quota"))
            })
        })
    })
}

/// Whether any EndpointSlice has a ready endpoint.
pub fn has_ready_endpoint(slices: &[Value]) -> bool {
    slices.iter().any(|slice| {
        slice["endpoints"].as_array().is_some_and(|endpoints| {
            endpoints
                .iter()
                .any(|e| e["conditions"]["ready"].as_bool() == Some(true))
        })
    })
}

/// Whether a namespace is being deleted.
pub fn terminating(object: &Value) -> bool {
    object["metadata"].get("deletionTimestamp").is_some()
        || object["status"]["phase"].as_str() == Some("Terminating")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, status: Value) -> Value {
        json!({"metadata": {"generation": generation}, "spec": {"replicas": 1}, "status": status})
    }

    #[test]
    fn g11_a_missing_material_secret_or_key_names_its_session() {
        let m = |r: &str, s: &str, name: &str| RepositoryMaterial {
            repository_ref: r.into(),
            session_id: s.into(),
            secret_name: name.into(),
            key: "token".into(),
        };
        let materials = [
            m("github.com/acme/app", "s-1", "git-app"),
            m("github.com/acme/lib", "s-2", "git-lib"),
        ];
        let pod = |message: &str| {
            json!({"metadata": {}, "status": {"containerStatuses": [{"name": "harness",
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": message}}}]}})
        };
        let missing = |pods: &[Value]| {
            missing_material(pods, &materials)
                .into_iter()
                .map(|m| m.session_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(missing(&[pod("secret \"git-lib\" not found")]), ["s-2"]);
        assert_eq!(
            missing(&[pod("couldn't find key token in Secret occ-ns1/git-app")]),
            ["s-1"]
        );
        // Another Secret, another reason, or a Pod going away names nothing.
        assert!(missing(&[pod("secret \"openai\" not found")]).is_empty());
        let mut other = pod("secret \"git-app\" not found");
        other["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] =
            json!("ContainerCreating");
        assert!(missing(&[other]).is_empty());
        let mut leaving = pod("secret \"git-app\" not found");
        leaving["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(missing(&[leaving]).is_empty());
        // Two Pods naming the same session name it once.
        let twice = [
            pod("secret \"git-app\" not found"),
            pod("secret \"git-app\" not found"),
        ];
        assert_eq!(missing(&twice), ["s-1"]);
    }

    #[test]
    fn rollout_follows_kubectl() {
        let done = json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1});
        assert_eq!(rollout(&deployment(2, done.clone())), Rollout::Complete);
        assert_eq!(rollout(&deployment(3, done)), Rollout::Progressing);
        let old = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1});
        assert_eq!(rollout(&deployment(1, old)), Rollout::Progressing);
        let unavailable = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1});
        assert_eq!(rollout(&deployment(1, unavailable)), Rollout::Progressing);
        let failed = json!({"observedGeneration": 1, "conditions": [
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]});
        assert_eq!(rollout(&deployment(1, failed)), Rollout::Failed);
        let mut scaled = deployment(1, json!({"observedGeneration": 1}));
        scaled["spec"]["replicas"] = json!(0);
        assert_eq!(rollout(&scaled), Rollout::Progressing);
    }

    #[test]
    fn pods_give_pending_reasons_and_bounded_failures_only() {
        let unschedulable = json!({"metadata": {}, "status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}});
        assert_eq!(
            pods(&[unschedulable]).pending_reason,
            Some("WORKLOAD_UNSCHEDULABLE")
        );
        let pull = json!({"metadata": {}, "status": {"containerStatuses": [
            {"name": "harness", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}});
        assert_eq!(
            pods(&[pull]).pending_reason,
            Some("WORKLOAD_IMAGE_PULL_FAILED")
        );
        let held = json!({"metadata": {}, "status": {"containerStatuses": [
            {"name": "harness", "restartCount": 3,
             "lastState": {"terminated": {"message": "AUTHENTICATION_FAILED\n"}}}]}});
        assert_eq!(
            pods(&[held]).runtime_failure,
            Some(RuntimeFailure {
                code: "AUTHENTICATION_FAILED".into(),
                container: Some("harness".into()),
                restart_count: Some(3),
            })
        );
        let prose = json!({"metadata": {}, "status": {"containerStatuses": [
            {"name": "harness", "state": {"terminated": {"message": "panic: key sk-123 rejected"}}}]}});
        assert_eq!(pods(&[prose]).runtime_failure, None);
    }

    fn harness_pod(phase: &str, container: Value) -> Value {
        json!({"metadata": {"name": "p1"}, "status": {"phase": phase,
            "containerStatuses": [container]}})
    }

    // The seed's entrypoints hold the container unready until an explicit restart that
    // nothing performs (SPEC R5): only a Running Pod whose harness
    // runs unready is asked, one at most.
    #[test]
    fn the_held_candidate_is_a_running_unready_harness() {
        let running = json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}});
        let held = json!({"name": "harness", "ready": false, "restartCount": 0, "state": running});
        assert_eq!(
            held_candidate(&[harness_pod("Running", held.clone())]),
            Some(HeldCandidate {
                pod: "p1".into(),
                restart_count: Some(0)
            })
        );
        let mut ready = held.clone();
        ready["ready"] = json!(true);
        assert_eq!(held_candidate(&[harness_pod("Running", ready)]), None);
        assert_eq!(
            held_candidate(&[harness_pod("Pending", held.clone())]),
            None
        );
        let mut waiting = held.clone();
        waiting["state"] = json!({"waiting": {"reason": "ContainerCreating"}});
        assert_eq!(held_candidate(&[harness_pod("Running", waiting)]), None);
        let mut other = held.clone();
        other["name"] = json!("sidecar");
        assert_eq!(held_candidate(&[harness_pod("Running", other)]), None);
        let mut deleting = harness_pod("Running", held.clone());
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(held_candidate(std::slice::from_ref(&deleting)), None);
        let mut second = harness_pod("Running", held);
        second["metadata"]["name"] = json!("p2");
        assert_eq!(
            held_candidate(&[deleting, second]).map(|c| c.pod),
            Some("p2".to_string())
        );
    }

    // Seed 004 lines 1063-1070, 5763-5770: the held code is the bounded code alone; anything
    // else the harness or the API server says is no finding.
    #[test]
    fn a_held_code_is_a_503_whose_body_is_a_bounded_code() {
        assert_eq!(
            held_code(503, b"AUTHENTICATION_FAILED"),
            Some("AUTHENTICATION_FAILED")
        );
        assert_eq!(
            held_code(503, b"  MODEL_PROBE_FAILED\r\n"),
            Some("MODEL_PROBE_FAILED")
        );
        // Not held: ready, or another status.
        for status in [200, 404, 500, 502] {
            assert_eq!(
                held_code(status, b"AUTHENTICATION_FAILED"),
                None,
                "{status}"
            );
        }
        // Prose, a starting harness, a Status from the API server, or not text.
        for body in [
            &b"waiting for OCC_AGENT_DOCUMENT"[..],
            b"panic: key sk-123 rejected",
            b"authentication_failed",
            br#"{"kind":"Status","code":503,"reason":"ServiceUnavailable"}"#,
            b"AUTHENTICATION_FAILED\nsk-live-123",
            b"",
            b"\xff\xfe",
        ] {
            assert_eq!(held_code(503, body), None, "{body:?}");
        }
        // Over-long: a code-like token past 64 bytes, and any body past the limit.
        assert_eq!(held_code(503, "A".repeat(65).as_bytes()), None);
        let padded = format!(
            "AUTHENTICATION_FAILED{}",
            " ".repeat(HELD_BODY_LIMIT as usize)
        );
        assert_eq!(held_code(503, padded.as_bytes()), None);
        assert_eq!(
            held_code(503, "A".repeat(64).as_bytes()).map(str::len),
            Some(64)
        );
    }

    #[test]
    fn quota_is_read_from_replica_set_conditions() {
        let rs = json!({"status": {"conditions": [{"type": "ReplicaFailure", "status": "True",
            "reason": "FailedCreate", "message": "pods \"x\" is forbidden: exceeded quota: q"}]}});
        assert!(quota_exceeded(&[rs]));
        assert!(!quota_exceeded(&[json!({"status": {}})]));
    }

    #[test]
    fn endpoints_must_be_ready() {
        let slice = json!({"endpoints": [{"conditions": {"ready": false}}]});
        assert!(!has_ready_endpoint(std::slice::from_ref(&slice)));
        let slice = json!({"endpoints": [{"conditions": {"ready": true}}]});
        assert!(has_ready_endpoint(&[slice]));
    }
}
