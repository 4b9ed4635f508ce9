//! What a reconciler tells a Compute Driver (SPEC C1): the specs of a Namespace, an Agent and
//! an admitted revision, with the Secret, managed-account and credential-source references and
//! the execution admission a revision carries.
//!
//! Plain data: a spec never holds a secret value, only references (SPEC Z4, M3), and this
//! module never talks to anything.

use serde::Serialize;

/// An isolation facet the built-in Sandbox Driver may declare and a revision pins (SPEC S2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Facet {
    PodSecurityRestricted,
    DefaultDenyEgress,
    NoServiceAccountToken,
    ReadOnlyRoot,
    RuntimeClass,
}

impl Facet {
    /// Every facet, in the order the docs list them.
    pub const ALL: [Facet; 5] = [
        Facet::PodSecurityRestricted,
        Facet::DefaultDenyEgress,
        Facet::NoServiceAccountToken,
        Facet::ReadOnlyRoot,
        Facet::RuntimeClass,
    ];

    /// Parses a facet's name; `None` for any other text.
    pub fn parse(name: &str) -> Option<Facet> {
        Facet::ALL.into_iter().find(|f| f.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Facet::PodSecurityRestricted => "pod-security-restricted",
            Facet::DefaultDenyEgress => "default-deny-egress",
            Facet::NoServiceAccountToken => "no-service-account-token",
            Facet::ReadOnlyRoot => "read-only-root",
            Facet::RuntimeClass => "runtime-class",
        }
    }
}

/// How a harness runs: its own Deployment per revision, or the Agent's shared gateway
/// (`occ.agent_revisions.harness_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HarnessMode {
    Dedicated,
    Embedded,
}

impl HarnessMode {
    /// Parses the stored text; `None` for any other value.
    pub fn parse(text: &str) -> Option<HarnessMode> {
        match text {
            "dedicated" => Some(HarnessMode::Dedicated),
            "embedded" => Some(HarnessMode::Embedded),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HarnessMode::Dedicated => "dedicated",
            HarnessMode::Embedded => "embedded",
        }
    }
}

/// What a driver needs to know about a Namespace.
#[derive(Clone, Debug, Serialize)]
pub struct NamespaceSpec {
    pub installation_id: String,
    pub namespace_id: String,
    pub name: String,
    /// The exact existing infrastructure namespace to adopt, if any.
    pub existing_namespace: Option<String>,
}

/// What a driver needs to know about an admitted revision.
#[derive(Clone, Debug, Serialize)]
pub struct RevisionSpec {
    pub installation_id: String,
    pub namespace_id: String,
    pub agent_id: String,
    pub revision_id: String,
    pub revision: i32,
    pub service_principal_id: String,
    pub harness_id: String,
    pub harness_version: String,
    pub harness_mode: HarnessMode,
    pub execution_mode: String,
    pub document: serde_json::Value,
    pub harness_auth: Option<serde_json::Value>,
    pub secret_bindings: serde_json::Value,
    /// Each Secret binding resolved to its Secret's metadata, by binding name; never a value.
    /// A binding whose Secret no longer exists is absent (the worker refuses such a revision
    /// with `SECRET_BINDING_UNAVAILABLE` before any Compute call that would use it).
    pub secrets: Vec<SecretProjection>,
    /// The Secret behind a `secret` harness auth, resolved the same way.
    pub harness_secret: Option<SecretProjection>,
    /// A `service_account` harness auth exactly as admitted (SPEC M3): no Secret projection;
    /// the driver mounts the access token from its `secretRef` and the worker never reads it.
    pub managed_account: Option<ManagedAccountAuth>,
    /// The revision's backend (SPEC M1), when it has one.
    pub backend_id: Option<String>,
    pub plugin_ids: Vec<String>,
    /// The execution admission stored with the revision (SPEC Z1), decided again every pass.
    pub execution_admission: ExecutionAdmission,
    /// The Sandbox facets pinned at admission (SPEC S2): the driver enforces each, or refuses
    /// the revision with `SANDBOX_FACET_UNAVAILABLE`.
    pub sandbox_facets: Vec<Facet>,
    /// The credential sources resolved for this pass (SPEC E19), in admission order, the
    /// harness source first: each attached by reference to its Secret, never read. A withdrawn
    /// tool source is left out; a revision whose harness source is withdrawn never gets here.
    pub credential_sources: Vec<CredentialAttachment>,
    /// The Agent's workspace setup read in this pass (SPEC WS3), handed to Compute with the
    /// revision; the worker never runs it. Never whether it completed (WS4), so completing it
    /// changes nothing the driver writes.
    pub workspace_setup: Option<WorkspaceSetup>,
    /// The Sandbox Driver pinned at admission (SPEC S2), which a driver delivering repository
    /// credentials verifies is the selected one (SPEC G10).
    pub sandbox_driver_id: Option<String>,
    /// The revision's repository credentials (SPEC §19), `None` when it has none.
    pub repository: Option<RepositoryAccess>,
}

/// A revision's repository credentials as Compute receives them (SPEC G11): the snapshot's
/// bindings and, once the worker prepared the sessions of this pass, each session's material.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RepositoryAccess {
    /// The snapshot's sender id (SPEC G8).
    pub sender_id: String,
    /// In admission order; the n-th binding's material is `OCC_GIT_CREDENTIAL_<n>`.
    pub bindings: Vec<RepositoryBinding>,
    /// Whether the revision runs under a standing approval rather than until a deadline.
    pub standing: bool,
    /// One per binding, in the same order, once the sessions are prepared (SPEC G19); empty
    /// before. Each names a Secret in the Agent's Kubernetes namespace that neither the worker
    /// nor the driver reads or writes.
    pub materials: Vec<RepositoryMaterial>,
}

/// One granted repository of a revision (SPEC G8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryBinding {
    pub repository_ref: String,
    pub scope: String,
}

/// An open session's material (SPEC G11, G20): where its Git credential is, never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RepositoryMaterial {
    pub repository_ref: String,
    pub session_id: String,
    /// The Secret's name and data key in the Agent's Kubernetes namespace.
    pub secret_name: String,
    pub key: String,
}

/// An entry of an unready observation's `repository_credential_material_missing` (SPEC G11):
/// a session whose material the runtime could not read.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MissingMaterial {
    pub repository_ref: String,
    pub session_id: String,
}

/// An Agent's workspace setup as Compute receives it (SPEC WS3): its id, new on every put,
/// and its document, opaque to the worker and carrying no secret value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WorkspaceSetup {
    pub id: String,
    pub document: serde_json::Value,
}

/// Where a managed account's access token is: a Kubernetes Secret's name and data key in the
/// Agent's namespace. Never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SecretRef {
    pub name: String,
    pub key: String,
}

/// A managed account's credential; `access_token` is the one kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Credential {
    AccessToken {
        #[serde(rename = "secretRef")]
        secret_ref: SecretRef,
    },
}

impl Credential {
    /// Where the credential's value is.
    pub fn secret_ref(&self) -> &SecretRef {
        match self {
            Credential::AccessToken { secret_ref } => secret_ref,
        }
    }
}

/// A managed account's backend binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackendBinding {
    pub backend_id: String,
    pub driver_id: String,
    pub workspace_id: String,
    pub credential_issued: bool,
}

/// The admitted `service_account` harness auth `{method, source: {namespaceId, id},
/// credential, backendBinding}` (SPEC §10). PostgreSQL enforces the shape; a legacy snapshot
/// may lack the credential or the binding (`None`), which the worker refuses before Compute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ManagedAccountAuth {
    #[serde(rename = "namespaceId")]
    pub namespace_id: String,
    /// The service account's id in its Namespace.
    pub id: String,
    pub credential: Option<Credential>,
    #[serde(rename = "backendBinding")]
    pub backend_binding: Option<BackendBinding>,
}

/// How a revision's harness authenticates (`harness_auth.method`; SPEC M1, §13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HarnessAuthMethod {
    Secret,
    ServiceAccount,
    CredentialSource,
    /// SPEC M5: the harness authenticates with what its runtime provides; OCC attaches no
    /// harness credential.
    Runtime,
}

impl HarnessAuthMethod {
    /// The method an admitted harness auth names; `None` for anything else.
    pub fn of(auth: &serde_json::Value) -> Option<HarnessAuthMethod> {
        match auth.get("method")?.as_str()? {
            "secret" => Some(HarnessAuthMethod::Secret),
            "service_account" => Some(HarnessAuthMethod::ServiceAccount),
            "credential_source" => Some(HarnessAuthMethod::CredentialSource),
            "runtime" => Some(HarnessAuthMethod::Runtime),
            _ => None,
        }
    }
}

impl ManagedAccountAuth {
    /// The managed account an admitted harness auth names, `None` for any other method.
    pub fn from_harness_auth(auth: &serde_json::Value) -> Option<ManagedAccountAuth> {
        if HarnessAuthMethod::of(auth) != Some(HarnessAuthMethod::ServiceAccount) {
            return None;
        }
        let field = |name: &str| auth.get(name).cloned().unwrap_or_default();
        Some(ManagedAccountAuth {
            namespace_id: auth["source"]["namespaceId"]
                .as_str()
                .unwrap_or_default()
                .into(),
            id: auth["source"]["id"].as_str().unwrap_or_default().into(),
            credential: serde_json::from_value(field("credential")).ok(),
            backend_binding: serde_json::from_value(field("backendBinding")).ok(),
        })
    }

    /// The access token's Secret reference, when the snapshot holds an access-token credential.
    pub fn access_token(&self) -> Option<&SecretRef> {
        self.credential.as_ref().map(Credential::secret_ref)
    }
}

/// A Secret binding resolved to the Secret's metadata: what a driver needs to reference the
/// value (Kubernetes `secretKeyRef`) without the worker ever reading it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SecretProjection {
    /// The binding name (an environment variable name for the runtime), or `harnessAuth`.
    pub binding: String,
    /// The Secret's id in its Namespace.
    pub id: String,
    /// The Secret's backend reference, `NAMESPACE/NAME/KEY`.
    #[serde(rename = "backendRef")]
    pub backend_ref: String,
    /// The Secret Driver that owns the Secret (SPEC Z4).
    #[serde(rename = "driverId", default, skip_serializing_if = "Option::is_none")]
    pub driver_id: Option<String>,
    /// The backend object's uid (SPEC Z4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl SecretProjection {
    /// Whether the Secret counts for a pass whose Installation selects `driver` (SPEC Z4):
    /// owned by that Secret Driver, with a backend reference naming a non-blank namespace,
    /// name and key, and a non-blank uid.
    pub fn resolvable_by(&self, driver: &str) -> bool {
        let blank = |s: &str| s.trim().is_empty();
        let parts: Vec<&str> = self.backend_ref.splitn(3, '/').collect();
        self.driver_id.as_deref() == Some(driver)
            && parts.len() == 3
            && parts.iter().all(|p| !blank(p))
            && self.uid.as_deref().is_some_and(|u| !blank(u))
    }
}

/// What a driver needs to know about an Agent: its per-Agent objects (`bind_agent`) and its
/// runtime credentials.
#[derive(Clone, Debug, Serialize)]
pub struct AgentSpec {
    pub installation_id: String,
    pub namespace_id: String,
    pub agent_id: String,
    pub service_principal_id: String,
}

/// One credential source of a revision's snapshot (SPEC §13): a Kubernetes Secret reference
/// `NAMESPACE/NAME/KEY` the Credential Gateway attaches to the runtime, never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CredentialAttachment {
    pub source_id: String,
    /// `model_key` or `tool`.
    pub kind: String,
    /// Whether this is the revision's harness source (auth method `credential_source`).
    pub harness: bool,
    pub backend_ref: String,
}

impl CredentialAttachment {
    /// The environment variable the runtime reads it from (SPEC §13): `OCC_HARNESS_API_KEY`
    /// for the harness source, else `OCC_CREDENTIAL_<ID>` (upper-cased, `-` → `_`).
    pub fn env_name(&self) -> String {
        if self.harness {
            "OCC_HARNESS_API_KEY".into()
        } else {
            credential_env_name(&self.source_id)
        }
    }
}

/// `OCC_CREDENTIAL_<ID>` of a tool source id (SPEC §13).
pub fn credential_env_name(source_id: &str) -> String {
    format!(
        "OCC_CREDENTIAL_{}",
        source_id.to_ascii_uppercase().replace(['-', '.'], "_")
    )
}

/// A revision's execution admission `{version, mode}` (SPEC Z1): PostgreSQL holds the shape
/// (a positive version, a mode `^[a-z][a-z_]{0,31}$`); whether a worker runs it is its
/// Compute Driver's decision (`DriverPolicy::validate_execution_admission`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionAdmission {
    pub version: u32,
    pub mode: String,
}

impl ExecutionAdmission {
    /// `{version: 5, mode: standard}`: what every revision is admitted with (Rust admits no
    /// egress plan or Git, SPEC §17), and the one pair the worker's own check allows.
    pub fn standard() -> ExecutionAdmission {
        ExecutionAdmission {
            version: 5,
            mode: "standard".into(),
        }
    }

    /// Whether a mode is within the stored shape, `^[a-z][a-z_]{0,31}$`.
    pub fn valid_mode(mode: &str) -> bool {
        mode.len() <= 32
            && mode.starts_with(|c: char| c.is_ascii_lowercase())
            && mode.chars().all(|c| c.is_ascii_lowercase() || c == '_')
    }
}
