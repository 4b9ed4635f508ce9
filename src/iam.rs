//! Native IAM: decides `authorize(principal, action, resource)` with evidence.
//!
//! A pass asks every question it may need at once (`decide`): one statement runs SQL
//! `occ.authorize` (its current body is in `sql/schema.sql`) for each request in one snapshot
//! and returns the decisions with the identities asked about, as a `Policy`. Nothing loads the installation's
//! whole policy during a pass. `Model` is that whole policy in memory, deciding the same way in
//! Rust: the reference the tests hold `occ.authorize` to, decision and evidence alike.
//!
//! Scopes nest installation → namespace → exact resource; a role grants its actions on its
//! resource kinds within the binding's scope; restrictions are deny overlays that win over
//! every binding. A binding or restriction names one identity or a group (a restriction may
//! also name nobody, meaning everyone); a group's binding or restriction applies to each of its
//! members, and the evidence names the groups it matched through. Decisions are made fresh
//! for every pass and never cached across passes. This module only reads.

use crate::db::DbError;
use crate::db::GenericClient;
use serde::{Deserialize, Serialize};

const LOAD: &str = include_str!("../sql/queries/iam_load.sql");
const DECIDE: &str = include_str!("../sql/queries/iam_decide.sql");

/// The actions of SPEC section 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Create,
    Delete,
    Administer,
    Operate,
    Deploy,
    Read,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Delete => "delete",
            Action::Administer => "administer",
            Action::Operate => "operate",
            Action::Deploy => "deploy",
            Action::Read => "read",
        }
    }
}

/// The resource kinds of SPEC section 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKind {
    Installation,
    Namespace,
    Agent,
    Configuration,
    Secret,
    ServiceAccount,
    CredentialSource,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Installation => "installation",
            ResourceKind::Namespace => "namespace",
            ResourceKind::Agent => "agent",
            ResourceKind::Configuration => "configuration",
            ResourceKind::Secret => "secret",
            ResourceKind::ServiceAccount => "service_account",
            ResourceKind::CredentialSource => "credential_source",
        }
    }
}

/// The resource a decision is about. The installation has no Namespace; a Namespace is its
/// own Namespace; everything else lives in one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Resource {
    pub kind: ResourceKind,
    pub id: String,
    #[serde(rename = "namespaceId", skip_serializing_if = "Option::is_none")]
    pub namespace_id: Option<String>,
}

impl Resource {
    pub fn installation(id: &str) -> Resource {
        Resource {
            kind: ResourceKind::Installation,
            id: id.into(),
            namespace_id: None,
        }
    }

    pub fn namespace(id: &str) -> Resource {
        Resource {
            kind: ResourceKind::Namespace,
            id: id.into(),
            namespace_id: Some(id.into()),
        }
    }

    /// Namespaces as a kind within the installation: what creating a new Namespace is
    /// decided against (only installation-scoped bindings and restrictions cover it).
    pub fn namespaces_in(installation_id: &str) -> Resource {
        Resource {
            kind: ResourceKind::Namespace,
            id: installation_id.into(),
            namespace_id: None,
        }
    }

    /// A Namespace-owned resource (agent, configuration, secret, service account).
    pub fn owned(kind: ResourceKind, namespace_id: &str, id: &str) -> Resource {
        Resource {
            kind,
            id: id.into(),
            namespace_id: Some(namespace_id.into()),
        }
    }
}

/// An authorization question.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Request {
    #[serde(rename = "principalId")]
    pub principal_id: String,
    pub action: Action,
    pub resource: Resource,
}

impl Request {
    pub fn new(principal_id: &str, action: Action, resource: Resource) -> Request {
        Request {
            principal_id: principal_id.into(),
            action,
            resource,
        }
    }
}

/// What matched: the evidence audit events keep.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    #[serde(rename = "identityId")]
    pub identity_id: Option<String>,
    /// The groups of the identity that a matching binding or restriction named, sorted.
    #[serde(rename = "groupIds")]
    pub group_ids: Vec<String>,
    #[serde(rename = "bindingIds")]
    pub binding_ids: Vec<i64>,
    #[serde(rename = "roleIds")]
    pub role_ids: Vec<String>,
    #[serde(rename = "restrictionIds")]
    pub restriction_ids: Vec<i64>,
}

/// A decision with its reason (`ALLOWED`, `NO_IDENTITY`, `NO_MATCHING_BINDING`, `RESTRICTED`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub allowed: bool,
    pub reason: &'static str,
    pub evidence: Evidence,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Identity {
    pub id: String,
    pub kind: IdentityKind,
    #[serde(rename = "namespaceId")]
    pub namespace_id: Option<String>,
    #[serde(rename = "agentId")]
    pub agent_id: Option<String>,
    /// The groups this identity is a member of.
    #[serde(rename = "groupIds", default)]
    pub group_ids: Vec<String>,
}

/// Who an identity is (`occ.identities.kind`); a stored value outside the CHECK fails to
/// decode the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentityKind {
    User,
    ServicePrincipal,
}

/// What a binding or restriction covers (`scope_kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ScopeKind {
    Installation,
    Namespace,
    Resource,
}

#[derive(Clone, Debug, Deserialize)]
struct Scope {
    #[serde(rename = "scopeKind")]
    scope_kind: ScopeKind,
    #[serde(rename = "namespaceId")]
    namespace_id: Option<String>,
    #[serde(rename = "resourceKind")]
    resource_kind: Option<String>,
    #[serde(rename = "resourceId")]
    resource_id: Option<String>,
}

impl Scope {
    /// Whether `resource` lies within this scope.
    fn covers(&self, resource: &Resource) -> bool {
        match self.scope_kind {
            ScopeKind::Installation => true,
            ScopeKind::Namespace => {
                resource.namespace_id.is_some() && resource.namespace_id == self.namespace_id
            }
            ScopeKind::Resource => {
                resource.namespace_id == self.namespace_id
                    && self.resource_kind.as_deref() == Some(resource.kind.as_str())
                    && self.resource_id.as_deref() == Some(resource.id.as_str())
            }
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
struct Binding {
    id: i64,
    #[serde(rename = "principalId")]
    principal_id: Option<String>,
    #[serde(rename = "groupId")]
    group_id: Option<String>,
    #[serde(rename = "roleId")]
    role_id: String,
    actions: Vec<String>,
    #[serde(rename = "resourceKinds")]
    resource_kinds: Vec<String>,
    #[serde(flatten)]
    scope: Scope,
}

#[derive(Clone, Debug, Deserialize)]
struct Restriction {
    id: i64,
    #[serde(rename = "principalId")]
    principal_id: Option<String>,
    #[serde(rename = "groupId")]
    group_id: Option<String>,
    actions: Vec<String>,
    #[serde(flatten)]
    scope: Scope,
}

/// The decisions one pass needs, made by `occ.authorize` in one statement (one snapshot),
/// and the identities asked about.
#[derive(Clone, Debug)]
pub struct Policy {
    decided: Vec<(Request, Decision)>,
    identities: Vec<Identity>,
}

/// A decision as `occ.authorize` returns it.
#[derive(Deserialize)]
struct Decided {
    allowed: bool,
    reason: String,
    evidence: Evidence,
}

/// Decides every request in `requests` with `occ.authorize`, and reads the identities of
/// their principals and of `identities`, in one statement. Asking more than a pass ends up
/// needing costs nothing but rows; a question not asked is refused (see `Policy::authorize`).
pub fn decide(
    client: &mut impl GenericClient,
    requests: &[Request],
    identities: &[&str],
) -> Result<Policy, DbError> {
    let column = |f: &dyn Fn(&Request) -> Option<String>| -> Vec<Option<String>> {
        requests.iter().map(f).collect()
    };
    let principals = column(&|r| Some(r.principal_id.clone()));
    let actions = column(&|r| Some(r.action.as_str().into()));
    let kinds = column(&|r| Some(r.resource.kind.as_str().into()));
    let ids = column(&|r| Some(r.resource.id.clone()));
    let namespaces = column(&|r| r.resource.namespace_id.clone());
    let mut wanted: Vec<&str> = requests.iter().map(|r| r.principal_id.as_str()).collect();
    wanted.extend_from_slice(identities);
    let row = client.query_one(
        DECIDE,
        &[&principals, &actions, &kinds, &ids, &namespaces, &wanted],
    )?;
    let unreadable = |e: serde_json::Error| {
        DbError::Corrupt(format!("occ.authorize answered what does not parse: {e}"))
    };
    let decided: Vec<Decided> = serde_json::from_value(row.get(0)).map_err(unreadable)?;
    let identities: Vec<Identity> = serde_json::from_value(row.get(1)).map_err(unreadable)?;
    if decided.len() != requests.len() {
        return Err(DbError::Corrupt(format!(
            "occ.authorize answered {} of {} requests",
            decided.len(),
            requests.len()
        )));
    }
    let decided = requests
        .iter()
        .cloned()
        .zip(decided)
        .map(|(request, d)| {
            let reason = REASONS
                .into_iter()
                .find(|r| *r == d.reason)
                .ok_or_else(|| {
                    DbError::Corrupt("occ.authorize answered an unknown reason".into())
                })?;
            let decision = Decision {
                allowed: d.allowed,
                reason,
                evidence: d.evidence,
            };
            Ok((request, decision))
        })
        .collect::<Result<_, DbError>>()?;
    Ok(Policy {
        decided,
        identities,
    })
}

/// Every reason a decision can give.
const REASONS: [&str; 4] = [
    "ALLOWED",
    "NO_IDENTITY",
    "NO_MATCHING_BINDING",
    "RESTRICTED",
];

/// The reason of a decision about a request the pass did not ask about (a broken invariant:
/// refused, never allowed).
pub const NOT_ASKED: &str = "NOT_ASKED";

impl Policy {
    /// One of the identities asked about.
    pub fn identity(&self, id: &str) -> Option<&Identity> {
        self.identities.iter().find(|i| i.id == id)
    }

    /// Whether a principal asked about still exists (a removed identity is revoked).
    pub fn identity_exists(&self, id: &str) -> bool {
        self.identity(id).is_some()
    }

    /// The decision on `request`, as `decide` asked it. A request that was not asked is a
    /// broken invariant: debug builds stop on it, release builds refuse it (`NOT_ASKED`).
    pub fn authorize(&self, request: &Request) -> Decision {
        let found = self.decided.iter().find(|(r, _)| r == request);
        debug_assert!(found.is_some(), "authorization not asked: {request:?}");
        match found {
            Some((_, decision)) => decision.clone(),
            None => Decision {
                allowed: false,
                reason: NOT_ASKED,
                evidence: Evidence::default(),
            },
        }
    }
}

/// The whole IAM policy of the installation in one snapshot, decided in Rust: the reference
/// model `occ.authorize` is tested against. No pass loads it.
#[derive(Clone, Debug, Deserialize)]
pub struct Model {
    identities: Vec<Identity>,
    bindings: Vec<Binding>,
    restrictions: Vec<Restriction>,
}

/// Loads the whole current policy (one statement, one snapshot).
pub fn load(client: &mut impl GenericClient) -> Result<Model, DbError> {
    let row = client.query_one(LOAD, &[])?;
    let value: serde_json::Value = row.get(0);
    serde_json::from_value(value)
        .map_err(|e| DbError::Corrupt(format!("persisted IAM policy does not parse: {e}")))
}

/// SPEC W8: the persisted IAM state, loaded and decoded row by row before the first claim; the
/// first row that does not decode is named (`occ.iam_bindings row 7: …`).
pub fn validate(client: &mut impl GenericClient) -> Result<(), DbError> {
    let row = client.query_one(LOAD, &[])?;
    let value: serde_json::Value = row.get(0);
    decode_each::<Identity>(&value, "identities", "occ.identities")?;
    decode_each::<Binding>(&value, "bindings", "occ.iam_bindings")?;
    decode_each::<Restriction>(&value, "restrictions", "occ.iam_restrictions")?;
    Ok(())
}

fn decode_each<T: serde::de::DeserializeOwned>(
    policy: &serde_json::Value,
    field: &str,
    table: &str,
) -> Result<(), DbError> {
    for item in policy[field].as_array().into_iter().flatten() {
        if let Err(e) = serde_json::from_value::<T>(item.clone()) {
            return Err(DbError::Corrupt(format!(
                "{table} row {} does not decode: {e}",
                item["id"]
            )));
        }
    }
    Ok(())
}

impl Model {
    pub fn identity(&self, id: &str) -> Option<&Identity> {
        self.identities.iter().find(|i| i.id == id)
    }

    /// Whether a principal still exists (a removed identity is revoked).
    pub fn identity_exists(&self, id: &str) -> bool {
        self.identity(id).is_some()
    }

    /// Decides `request`. Restrictions win over bindings; no identity means no access.
    pub fn authorize(&self, request: &Request) -> Decision {
        let mut evidence = Evidence::default();
        let Some(identity) = self.identity(&request.principal_id) else {
            return Decision {
                allowed: false,
                reason: "NO_IDENTITY",
                evidence,
            };
        };
        evidence.identity_id = Some(identity.id.clone());
        let member = |group: &str| identity.group_ids.iter().any(|g| g == group);
        // Whether a binding or restriction naming (principal, group) applies to the identity,
        // and through which group.
        let names = |principal: Option<&str>, group: Option<&str>| match (principal, group) {
            (Some(p), _) => (p == identity.id, None),
            (None, Some(g)) => (member(g), Some(g.to_string())),
            (None, None) => (false, None),
        };
        let mut groups = Vec::new();
        let action = request.action.as_str();
        let kind = request.resource.kind.as_str();
        for b in &self.bindings {
            let (applies, through) = names(b.principal_id.as_deref(), b.group_id.as_deref());
            if applies
                && b.actions.iter().any(|a| a == action)
                && b.resource_kinds.iter().any(|k| k == kind)
                && b.scope.covers(&request.resource)
            {
                evidence.binding_ids.push(b.id);
                groups.extend(through);
                if !evidence.role_ids.contains(&b.role_id) {
                    evidence.role_ids.push(b.role_id.clone());
                }
            }
        }
        for r in &self.restrictions {
            let (applies, through) = match (r.principal_id.as_deref(), r.group_id.as_deref()) {
                (None, None) => (true, None),
                (principal, group) => names(principal, group),
            };
            if applies && r.actions.iter().any(|a| a == action) && r.scope.covers(&request.resource)
            {
                evidence.restriction_ids.push(r.id);
                groups.extend(through);
            }
        }
        groups.sort();
        groups.dedup();
        evidence.group_ids = groups;
        let (allowed, reason) = if !evidence.restriction_ids.is_empty() {
            (false, "RESTRICTED")
        } else if evidence.binding_ids.is_empty() {
            (false, "NO_MATCHING_BINDING")
        } else {
            (true, "ALLOWED")
        };
        Decision {
            allowed,
            reason,
            evidence,
        }
    }
}
