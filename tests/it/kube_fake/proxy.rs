//! The fake API server's Pod proxy subresource (test-only): `GET
//! /api/v1/namespaces/{ns}/pods/{[scheme:]name[:port]}/proxy/{path}`, with the API server's
//! own part as a real one answers it (400 `invalid pod request` for a malformed name, 404
//! `NotFound` for a missing Pod, 400 `address not allowed` for a Pod without an IP, 503
//! `ServiceUnavailable` when nothing listens on the port, every one a `Status`) and, past it,
//! the Pod's "container" answering plain text as its behaviour says: `/readyz` 200 when ready,
//! 503 `not ready` while it is not, 503 with the code alone under `HeldUnready`; `/livez` 200.
//!
//! Only GET is proxied; the proxy answers nothing else (405). It reads the store and never
//! writes it.

use super::controller::{behaviour_for, Behaviours};
use super::store::{resource, ApiError, Store};
use super::{PodBehaviour, Request};
use serde_json::Value;

/// The answer to a Pod proxy request, `None` when the request is not one: Ok is the
/// container's (status, plain-text body), Err the API server's own `Status`.
pub fn pod_proxy(
    store: &Store,
    behaviours: &Behaviours,
    request: &Request,
) -> Option<Result<(u16, String), ApiError>> {
    let path = request.target.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let ["api", "v1", "namespaces", ns, "pods", id, "proxy", rest @ ..] = segments.as_slice()
    else {
        return None;
    };
    if request.method != "GET" {
        return Some(Err(ApiError::plain(
            405,
            &format!("the fake proxies GET only ({} {path})", request.method),
        )));
    }
    Some(answer(store, behaviours, ns, id, &rest.join("/")))
}

/// `podname`, `podname:port` or `scheme:podname:port`, as the API server splits a proxy id.
fn split_id(id: &str) -> Option<(&str, &str)> {
    match *id.split(':').collect::<Vec<_>>().as_slice() {
        [name] => Some((name, "")),
        [name, port] => Some((name, port)),
        [scheme, name, port] if ["", "http", "https"].contains(&scheme) => Some((name, port)),
        _ => None,
    }
    .filter(|(name, _)| !name.is_empty())
}

fn answer(
    store: &Store,
    behaviours: &Behaviours,
    ns: &str,
    id: &str,
    path: &str,
) -> Result<(u16, String), ApiError> {
    let (name, port) = split_id(id)
        .ok_or_else(|| ApiError::bad_request(&format!("invalid pod request {id:?}")))?;
    let pods = resource("pods");
    let pod = store
        .lookup(pods, ns, name)
        .ok_or_else(|| ApiError::not_found(pods, name))?;
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let port: i64 = if port.is_empty() {
        // No port: the first one a container declares.
        containers
            .iter()
            .find_map(|c| c["ports"][0]["containerPort"].as_i64())
            .unwrap_or(80)
    } else {
        port.parse()
            .map_err(|_| ApiError::bad_request(&format!("invalid pod request {id:?}")))?
    };
    let ip = pod["status"]["podIPs"][0]["ip"]
        .as_str()
        .or_else(|| pod["status"]["podIP"].as_str())
        .filter(|ip| !ip.is_empty())
        .ok_or_else(|| ApiError::bad_request("address not allowed"))?;
    // A container that declares the port and is running listens on it.
    let listening = containers.iter().any(|c| {
        let declares = c["ports"].as_array().is_some_and(|ports| {
            ports
                .iter()
                .any(|p| p["containerPort"].as_i64() == Some(port))
        });
        declares && running(pod, c["name"].as_str().unwrap_or_default())
    });
    if !listening {
        return Err(ApiError::new(
            503,
            "ServiceUnavailable",
            &format!(
                "error trying to reach service: dial tcp {ip}:{port}: connect: connection refused"
            ),
            Value::Null,
        ));
    }
    let behaviour = behaviour_for(behaviours, ns, name);
    Ok(match path {
        "livez" => (200, "ok".to_string()),
        "readyz" => match behaviour {
            PodBehaviour::HeldUnready(code) => (503, code),
            PodBehaviour::NeverReady | PodBehaviour::ProgressDeadlineExceeded => {
                (503, "not ready".to_string())
            }
            _ => (200, "ok".to_string()),
        },
        _ => (404, "404 page not found\n".to_string()),
    })
}

/// Whether the Pod's status says the named container is running.
fn running(pod: &Value, container: &str) -> bool {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == container && c["state"]["running"].is_object())
}
