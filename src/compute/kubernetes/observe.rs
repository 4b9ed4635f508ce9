//! Reading Kubernetes status into the worker's vocabulary: rollout readiness (the
//! `kubectl rollout status` rule), pending reasons from Pods and ReplicaSets, held runtime
//! failures from container termination messages, and EndpointSlice readiness.
//!
//! Everything here is a pure function of API objects, so it is tested without a server. It
//! never copies provider free text into what it returns: a termination message becomes a
//! runtime failure only when it is a bounded code, and a ReplicaSet's quota message is only
//! matched, never kept.

use crate::compute::{is_code, RuntimeFailure};
use serde_json::Value;

/// The harness container's name in every workload the driver creates.
pub const HARNESS_CONTAINER: &str = "harness";

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
/// failure (the harness image contract: write the code, and nothing else, to
/// `/dev/termination-log` before exiting).
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
        for container in pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
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
                findings.runtime_failure = Some(RuntimeFailure {
                    code: code.to_string(),
                    container: Some(HARNESS_CONTAINER.to_string()),
                    restart_count: container["restartCount"]
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok()),
                });
            }
        }
    }
    findings
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
