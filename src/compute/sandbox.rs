//! The Sandbox Driver seam (SPEC S1, S2, S3): the selected Sandbox Driver as Compute takes it
//! at construction, an egress rule, and `SandboxDriver`, the capability a Compute Driver offers
//! when it enforces a sandbox (`ComputeDriver::sandbox`).
//!
//! The Installation file's validation of these lives in `installation`, above this module; this
//! module never reads a file or talks to anything.

use super::error::ComputeError;
use super::spec::{AgentSpec, Facet};
use crate::cancel::CancelToken;

/// The selected Sandbox Driver (SPEC S1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    pub id: String,
    pub facets: Vec<Facet>,
    pub runtime_class_name: Option<String>,
}

/// One egress entry: a network and the TCP ports on it (SPEC S3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressRule {
    /// Canonical `address/prefix`.
    pub cidr: String,
    pub ports: Vec<u16>,
}

impl EgressRule {
    /// `{"cidr": …, "ports": […]}`, as the file and the database spell it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"cidr": self.cidr, "ports": self.ports})
    }
}

/// The Sandbox Driver's calls (SPEC S3), offered by a Compute Driver that enforces one. Where a
/// driver offers none, `apply_egress_policy` is a permanent `SANDBOX_DRIVER_UNAVAILABLE`
/// (`sandbox_driver_unavailable`) and `remove_egress_policy` has nothing to remove.
pub trait SandboxDriver: Send + Sync {
    /// Makes the Agent's Pods' egress exactly `egress` (its generation `generation`), removing
    /// the policy when `egress` is empty (SPEC S3).
    fn apply_egress_policy(
        &self,
        agent: &AgentSpec,
        generation: i32,
        egress: &[EgressRule],
        cancel: &CancelToken,
    ) -> Result<(), ComputeError>;
    /// The Agent's egress policy is gone (SPEC S3, A2).
    fn remove_egress_policy(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError>;
}

/// `apply_egress_policy` without a Sandbox Driver (SPEC S3): a permanent
/// `SANDBOX_DRIVER_UNAVAILABLE`.
pub fn sandbox_driver_unavailable() -> ComputeError {
    ComputeError::permanent("SANDBOX_DRIVER_UNAVAILABLE", "compute", None)
}
