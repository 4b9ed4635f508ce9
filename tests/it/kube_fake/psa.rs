//! Pod Security admission's `restricted` level (test-only), as the API server enforces it on
//! Pods in a namespace labelled `pod-security.kubernetes.io/enforce: restricted`: the checks of
//! the Pod Security Standards' restricted profile that a Pod spec can fail.

use serde_json::Value;

/// The volume types the restricted profile allows.
const ALLOWED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// What a Pod spec breaks of the restricted profile, one phrase per check (empty: admitted).
pub fn restricted_violations(spec: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[host] == true {
            found.push(format!("host namespaces ({host}=true)"));
        }
    }
    let pod = &spec["securityContext"];
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec[*k].as_array().into_iter().flatten())
        .collect();
    for c in &containers {
        let name = c["name"].as_str().unwrap_or("?");
        let sc = &c["securityContext"];
        if sc["privileged"] == true {
            found.push(format!("privileged (container {name:?})"));
        }
        if sc["allowPrivilegeEscalation"] != false {
            found.push(format!(
                "allowPrivilegeEscalation != false (container {name:?})"
            ));
        }
        let drops_all = sc["capabilities"]["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !drops_all {
            found.push(format!(
                "unrestricted capabilities (container {name:?} must drop ALL)"
            ));
        }
        let adds_other = sc["capabilities"]["add"]
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c != "NET_BIND_SERVICE"));
        if adds_other {
            found.push(format!(
                "unrestricted capabilities (container {name:?} adds more than NET_BIND_SERVICE)"
            ));
        }
        let non_root = sc["runAsNonRoot"] == true
            || (sc["runAsNonRoot"].is_null() && pod["runAsNonRoot"] == true);
        if !non_root {
            found.push(format!("runAsNonRoot != true (container {name:?})"));
        }
        if sc["runAsUser"] == 0 || (sc["runAsUser"].is_null() && pod["runAsUser"] == 0) {
            found.push(format!("runAsUser=0 (container {name:?})"));
        }
        let seccomp = if sc["seccompProfile"].is_null() {
            &pod["seccompProfile"]["type"]
        } else {
            &sc["seccompProfile"]["type"]
        };
        if seccomp != "RuntimeDefault" && seccomp != "Localhost" {
            found.push(format!(
                "seccompProfile (container {name:?} must be RuntimeDefault or Localhost)"
            ));
        }
    }
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let allowed = volume.as_object().is_some_and(|v| {
            v.keys()
                .all(|k| k == "name" || ALLOWED_VOLUMES.contains(&k.as_str()))
        });
        if !allowed {
            found.push(format!(
                "restricted volume types (volume {:?})",
                volume["name"].as_str().unwrap_or("?")
            ));
        }
    }
    found
}
