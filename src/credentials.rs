//! Credential sources as a revision froze them (SPEC §13): the snapshot entries, the source
//! rows they are matched against, and the order a withdrawal walks them in (E3). Pure
//! functions: the reconcilers read the rows, this module decides.

use crate::compute::{CredentialAttachment, HarnessAuthMethod};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One entry of a revision's `credential_sources` snapshot (PostgreSQL holds its shape:
/// `occ.is_credential_snapshot`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotSource {
    pub source_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_gateway_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_proxy_id: Option<String>,
    pub kind: String,
    pub driver_id: String,
    pub backend_ref: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Value>,
}

impl SnapshotSource {
    /// The owner the snapshot names: the proxy when it names one, else the gateway.
    pub fn owner(&self) -> &'static str {
        if self.credential_proxy_id.is_some() {
            "credential_proxy"
        } else {
            "credential_gateway"
        }
    }

    /// The id of the owner the snapshot names.
    pub fn owner_id(&self) -> &str {
        self.credential_proxy_id
            .as_deref()
            .or(self.credential_gateway_id.as_deref())
            .unwrap_or("")
    }

    pub fn attachment(&self, harness: bool) -> CredentialAttachment {
        CredentialAttachment {
            source_id: self.source_id.clone(),
            kind: self.kind.clone(),
            harness,
            backend_ref: self.backend_ref.clone(),
        }
    }
}

/// A row of `occ.credential_sources` as the worker reads it.
/// A credential source's state (`occ.credential_sources.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    Ready,
    Disabled,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceRow {
    pub id: String,
    pub kind: String,
    pub owner: String,
    pub driver_id: String,
    pub state: SourceState,
    pub backend_ref: String,
    #[serde(default)]
    pub egress: Option<Value>,
}

impl SourceRow {
    /// SPEC §13: a source *matches its snapshot* when its driver, owner, kind, backend
    /// reference and egress are the snapshot's.
    pub fn matches(&self, snapshot: &SnapshotSource) -> bool {
        let egress = |e: &Option<Value>| e.clone().filter(|v| !v.is_null());
        self.driver_id == snapshot.driver_id
            && self.owner == snapshot.owner()
            && self.kind == snapshot.kind
            && self.backend_ref == snapshot.backend_ref
            && egress(&self.egress) == egress(&snapshot.egress)
    }
}

impl SourceRow {
    /// SPEC E6(a): the source's driver is its owner's id — the selected gateway for a
    /// gateway-owned source; no Credential Proxy is built in, so a proxy-owned source never is
    /// — and the source matches its snapshot.
    pub fn owned(&self, snapshot: &SnapshotSource, gateway: Option<&str>) -> bool {
        let owner_id = match self.owner.as_str() {
            "credential_gateway" => gateway,
            _ => None,
        };
        owner_id == Some(self.driver_id.as_str()) && self.matches(snapshot)
    }
}

/// The harness source id of a `credential_source` harness auth.
pub fn harness_source_id(harness_auth: Option<&Value>) -> Option<&str> {
    let auth = harness_auth?;
    if HarnessAuthMethod::of(auth) != Some(HarnessAuthMethod::CredentialSource) {
        return None;
    }
    auth.get("sourceId").and_then(Value::as_str)
}

/// The gateway id a `credential_source` harness auth names.
pub fn harness_gateway_id(harness_auth: Option<&Value>) -> Option<&str> {
    harness_source_id(harness_auth)?;
    harness_auth?
        .get("credentialGatewayId")
        .and_then(Value::as_str)
}

/// SPEC E3's order: the harness source first when the method is `credential_source`, then
/// each other snapshot source once, in admission order. Each with whether it is the harness
/// source.
pub fn in_order<'a>(
    snapshot: &'a [SnapshotSource],
    harness_auth: Option<&Value>,
) -> Vec<(&'a SnapshotSource, bool)> {
    let harness = harness_source_id(harness_auth);
    let mut out: Vec<(&SnapshotSource, bool)> = Vec::new();
    if let Some(h) = harness {
        out.extend(
            snapshot
                .iter()
                .filter(|s| s.source_id == h)
                .map(|s| (s, true)),
        );
    }
    for s in snapshot {
        if Some(s.source_id.as_str()) != harness
            && !out.iter().any(|(o, _)| o.source_id == s.source_id)
        {
            out.push((s, false));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn source(id: &str, kind: &str) -> SnapshotSource {
        SnapshotSource {
            source_id: id.into(),
            credential_gateway_id: Some("gw".into()),
            credential_proxy_id: None,
            kind: kind.into(),
            driver_id: "gw".into(),
            backend_ref: format!("ns/{id}/key"),
            egress: None,
        }
    }

    #[test]
    fn e3_the_harness_source_comes_first_then_each_other_once() {
        let snapshot = vec![
            source("tool-a", "tool"),
            source("model", "model_key"),
            source("tool-b", "tool"),
        ];
        let auth = json!({"method": "credential_source", "sourceId": "model", "credentialGatewayId": "gw"});
        let order: Vec<(&str, bool)> = in_order(&snapshot, Some(&auth))
            .into_iter()
            .map(|(s, h)| (s.source_id.as_str(), h))
            .collect();
        assert_eq!(
            order,
            [("model", true), ("tool-a", false), ("tool-b", false)]
        );
        let order: Vec<bool> = in_order(&snapshot, None)
            .into_iter()
            .map(|(_, h)| h)
            .collect();
        assert_eq!(order, [false, false, false]);
    }

    #[test]
    fn a_source_matches_its_snapshot_only_when_every_frozen_field_agrees() {
        let snap = source("tool-a", "tool");
        let row = SourceRow {
            id: "tool-a".into(),
            kind: "tool".into(),
            owner: "credential_gateway".into(),
            driver_id: "gw".into(),
            state: SourceState::Ready,
            backend_ref: "ns/tool-a/key".into(),
            egress: Some(Value::Null),
        };
        assert!(row.matches(&snap));
        let moved = SourceRow {
            backend_ref: "ns/other/key".into(),
            ..row.clone()
        };
        assert!(!moved.matches(&snap));
        let proxied = SourceRow {
            owner: "credential_proxy".into(),
            ..row.clone()
        };
        assert!(!proxied.matches(&snap));
        let egress = SourceRow {
            egress: Some(json!({"provider": "p", "backend": "b"})),
            ..row
        };
        assert!(!egress.matches(&snap));
    }

    #[test]
    fn tool_sources_are_read_from_occ_credential_names() {
        assert_eq!(
            crate::compute::credential_env_name("search-api"),
            "OCC_CREDENTIAL_SEARCH_API"
        );
        let harness = source("model", "model_key").attachment(true);
        assert_eq!(harness.env_name(), "OCC_HARNESS_API_KEY");
    }
}
