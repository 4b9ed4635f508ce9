//! The Agent and revision rows as a pass sees them (`AgentRow`, `RevisionRow`) and their
//! loaders, shared by every Agent reconciler. Reads only: lifecycle writes belong to the
//! reconcilers' fenced publications.

use super::pass::{Pass, PassError};
use crate::compute::{
    AgentSpec, ExecutionAdmission, HarnessMode, ManagedAccountAuth, RevisionSpec, SecretProjection,
};
use crate::db::GenericClient;
use serde_json::Value;

const AGENT_LOAD: &str = include_str!("../../sql/queries/agent_load.sql");
const REVISIONS_LOAD: &str = include_str!("../../sql/queries/agent_revisions_load.sql");

/// A lifecycle value stored as text and parsed where its row is loaded: a value outside its
/// CHECK constraint is corrupt data (`DbError::Corrupt`), never a wrong branch later.
macro_rules! stored_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            /// Parses the stored text.
            pub fn parse(text: &str) -> Result<$name, $crate::reconcile::PassError> {
                match text {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::reconcile::PassError::Db($crate::db::DbError::Corrupt(format!(
                        concat!(stringify!($name), " {:?}"),
                        other
                    )))),
                }
            }

            /// The stored text.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }
    };
}

stored_enum! {
    /// An Agent's lifecycle status (`occ.agents.status`).
    AgentStatus { Active = "active", Deleting = "deleting" }
}

stored_enum! {
    /// The runtime state an Agent's operator asked for (`occ.agents.desired_runtime_state`).
    RuntimeState { Running = "running", Stopped = "stopped" }
}

stored_enum! {
    /// A Namespace's lifecycle status (`occ.namespaces_all.status`).
    NamespaceStatus {
        Provisioning = "provisioning",
        Ready = "ready",
        Failed = "failed",
        Deleting = "deleting",
    }
}

stored_enum! {
    /// A withdrawal row's state (`occ.credential_withdrawals.state`, SPEC E1).
    WithdrawalState { Pending = "pending", Revoked = "revoked" }
}

/// An Agent as a pass sees it.
#[derive(Clone, Debug)]
pub struct AgentRow {
    pub id: String,
    pub namespace_id: String,
    pub status: AgentStatus,
    pub desired_runtime_state: RuntimeState,
    pub active_revision_id: Option<String>,
    pub service_principal_id: String,
    pub namespace_status: NamespaceStatus,
}

impl AgentRow {
    /// Whether the Agent runs under `principal`: its Namespace ready, itself active and
    /// running with that service principal (SPEC G10).
    pub fn runs_as(&self, principal: &str) -> bool {
        self.namespace_status == NamespaceStatus::Ready
            && self.status == AgentStatus::Active
            && self.desired_runtime_state == RuntimeState::Running
            && self.service_principal_id == principal
    }

    /// Whether the Agent still runs `revision`: `runs_as` its principal, pointing at it
    /// (SPEC G14, G15).
    pub fn runs_revision(&self, revision: &RevisionRow) -> bool {
        self.runs_as(&revision.service_principal_id)
            && self.active_revision_id.as_deref() == Some(revision.id.as_str())
    }

    /// What a driver needs to know about this Agent.
    pub fn spec(&self, installation_id: &str) -> AgentSpec {
        AgentSpec {
            installation_id: installation_id.into(),
            namespace_id: self.namespace_id.clone(),
            agent_id: self.id.clone(),
            service_principal_id: self.service_principal_id.clone(),
        }
    }
}

/// An admitted revision as a pass sees it.
#[derive(Clone, Debug)]
pub struct RevisionRow {
    pub id: String,
    pub namespace_id: String,
    pub agent_id: String,
    pub revision: i32,
    pub actor_id: String,
    pub service_principal_id: String,
    pub configuration_id: String,
    pub configuration_generation: i32,
    pub document: Value,
    pub harness_id: String,
    pub harness_version: String,
    pub harness_mode: HarnessMode,
    pub execution_mode: String,
    pub compute_id: String,
    pub compute_implementation: String,
    pub harness_auth: Option<Value>,
    pub secret_bindings: Value,
    pub plugins: Value,
    /// The Secret bindings that resolve to an existing Secret of the Namespace.
    pub secrets: Vec<SecretProjection>,
    /// The Secret of a `secret` harness auth, when it exists.
    pub harness_secret: Option<SecretProjection>,
    /// The revision's backend (SPEC M1), when it has one.
    pub backend_id: Option<String>,
    pub retired: bool,
    pub admitted_before_work: bool,
    /// The Secret Driver the Installation selected when the revision was admitted (SPEC Z4).
    pub secret_driver_id: Option<String>,
    /// The stored execution admission (SPEC Z1).
    pub execution_admission: ExecutionAdmission,
    /// The Sandbox Driver and its facets pinned at admission (SPEC S2).
    pub sandbox_driver_id: Option<String>,
    pub sandbox_facets: Vec<crate::compute::Facet>,
    /// The credential sources frozen at admission (SPEC §13), the harness source included.
    pub credential_sources: Vec<crate::credentials::SnapshotSource>,
    /// The repository credentials snapshotted at admission (SPEC §19), `None` without.
    pub repository_credentials: Option<Value>,
}

impl RevisionRow {
    /// The plugin ids the snapshot admitted (PostgreSQL guarantees the shape).
    pub fn plugin_ids(&self) -> Vec<String> {
        self.plugins
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.get("id").and_then(Value::as_str).map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether this revision names `agent` as its owner: same Namespace, Agent and service
    /// principal.
    pub fn owned_by_agent(&self, agent: &AgentRow) -> bool {
        self.namespace_id == agent.namespace_id
            && self.agent_id == agent.id
            && self.service_principal_id == agent.service_principal_id
    }

    /// Whether this revision belongs to the Compute Driver the worker runs.
    pub fn owned_by(&self, pass: &Pass<'_>) -> bool {
        self.compute_id == pass.ctx.compute.id()
            && self.compute_implementation == pass.ctx.compute.implementation()
    }

    pub fn spec(&self, installation_id: &str) -> RevisionSpec {
        RevisionSpec {
            installation_id: installation_id.into(),
            namespace_id: self.namespace_id.clone(),
            agent_id: self.agent_id.clone(),
            revision_id: self.id.clone(),
            revision: self.revision,
            service_principal_id: self.service_principal_id.clone(),
            harness_id: self.harness_id.clone(),
            harness_version: self.harness_version.clone(),
            harness_mode: self.harness_mode,
            execution_mode: self.execution_mode.clone(),
            document: self.document.clone(),
            harness_auth: self.harness_auth.clone(),
            secret_bindings: self.secret_bindings.clone(),
            secrets: self.secrets.clone(),
            harness_secret: self.harness_secret.clone(),
            managed_account: self
                .harness_auth
                .as_ref()
                .and_then(ManagedAccountAuth::from_harness_auth),
            backend_id: self.backend_id.clone(),
            plugin_ids: self.plugin_ids(),
            execution_admission: self.execution_admission.clone(),
            sandbox_facets: self.sandbox_facets.clone(),
            // Filled by SPEC E19's resolution before a preparation; no other call attaches.
            credential_sources: Vec::new(),
            // Read by the revision pass with the Agent's record (SPEC WS3).
            workspace_setup: None,
            sandbox_driver_id: self.sandbox_driver_id.clone(),
            // Read by the revision pass with its sessions (SPEC G11, G19).
            repository: None,
        }
    }
}

/// Loads the Agent of a work, or `None` when it is gone.
pub fn load_agent(
    client: &mut impl GenericClient,
    namespace_id: &str,
    agent_id: &str,
) -> Result<Option<AgentRow>, PassError> {
    client
        .query_opt(AGENT_LOAD, &[&namespace_id, &agent_id])?
        .map(|r| {
            Ok(AgentRow {
                id: r.get(0),
                namespace_id: r.get(1),
                status: AgentStatus::parse(r.get(2))?,
                desired_runtime_state: RuntimeState::parse(r.get(3))?,
                active_revision_id: r.get(4),
                service_principal_id: r.get(5),
                namespace_status: NamespaceStatus::parse(r.get(6))?,
            })
        })
        .transpose()
}

/// Loads an Agent's revisions (all, or the one named), oldest first.
pub fn load_revisions(
    client: &mut impl GenericClient,
    namespace_id: &str,
    agent_id: &str,
    only: Option<&str>,
    work_id: i64,
) -> Result<Vec<RevisionRow>, PassError> {
    let rows = client.query(REVISIONS_LOAD, &[&namespace_id, &agent_id, &only, &work_id])?;
    rows.iter()
        .map(|r| {
            let secrets: Value = r.get(19);
            let harness_secret: Option<Value> = r.get(20);
            let broken = |e: serde_json::Error| {
                PassError::Invariant(format!("resolved Secret metadata: {e}"))
            };
            Ok(RevisionRow {
                id: r.get(0),
                namespace_id: r.get(1),
                agent_id: r.get(2),
                revision: r.get(3),
                actor_id: r.get(4),
                service_principal_id: r.get(5),
                configuration_id: r.get(6),
                configuration_generation: r.get(7),
                document: r.get(8),
                harness_id: r.get(9),
                harness_version: r.get(10),
                harness_mode: HarnessMode::parse(r.get(11)).ok_or_else(|| {
                    PassError::Db(crate::db::DbError::Corrupt(format!(
                        "harness mode {:?}",
                        r.get::<_, &str>(11)
                    )))
                })?,
                execution_mode: r.get(12),
                compute_id: r.get(13),
                compute_implementation: r.get(14),
                harness_auth: r.get(15),
                secret_bindings: r.get(16),
                plugins: r.get(17),
                retired: r.get(18),
                secrets: serde_json::from_value(secrets).map_err(broken)?,
                harness_secret: harness_secret
                    .map(serde_json::from_value)
                    .transpose()
                    .map_err(broken)?,
                admitted_before_work: r.get(21),
                backend_id: r.get(22),
                secret_driver_id: r.get(23),
                execution_admission: serde_json::from_value(r.get(24)).map_err(|e| {
                    PassError::Invariant(format!("stored execution admission: {e}"))
                })?,
                sandbox_driver_id: r.get(25),
                sandbox_facets: serde_json::from_value(r.get(26))
                    .map_err(|e| PassError::Invariant(format!("pinned sandbox facets: {e}")))?,
                credential_sources: serde_json::from_value(r.get(27)).map_err(|e| {
                    PassError::Invariant(format!("credential source snapshot: {e}"))
                })?,
                repository_credentials: r.get(28),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_state_outside_its_values_is_corrupt() {
        assert_eq!(
            RuntimeState::parse("stopped").unwrap(),
            RuntimeState::Stopped
        );
        assert_eq!(NamespaceStatus::Deleting.as_str(), "deleting");
        for bad in ["", "Running", "paused"] {
            let e = RuntimeState::parse(bad).unwrap_err();
            assert!(
                matches!(e, PassError::Db(crate::db::DbError::Corrupt(_))),
                "{bad}: {e:?}"
            );
        }
        assert!(WithdrawalState::parse("withdrawn").is_err());
    }
}
