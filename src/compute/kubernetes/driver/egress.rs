//! The built-in Sandbox Driver's egress policies (SPEC S3): the NetworkPolicy
//! `occ-egress-<agent>` an Agent's sandbox policy becomes, written and removed like the Agent's
//! other owned objects.

use super::*;

impl SandboxDriver for KubernetesDriver {
    /// NetworkPolicy `occ-egress-<agent>` selecting the Agent's Pods, egress to each entry's
    /// network on its TCP ports; deleted when `egress` is empty (SPEC S3). Owned like the
    /// Agent's other objects: one without this installation's labels is never touched.
    fn apply_egress_policy(
        &self,
        agent: &AgentSpec,
        generation: i32,
        egress: &[EgressRule],
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        // Without a selected Sandbox Driver there is nothing to enforce the policy with.
        if self.sandbox.is_none() {
            return Err(ComputeError::permanent(
                "SANDBOX_DRIVER_UNAVAILABLE",
                "kubernetes_sandbox",
                None,
            ));
        }
        if egress.is_empty() {
            return self.remove_egress_policy(agent, cancel);
        }
        let namespace = self.namespace_of(&agent.installation_id, &agent.namespace_id, cancel)?;
        self.converge(
            &format!("{NETWORKING}/namespaces/{namespace}/networkpolicies"),
            &sandbox::egress_policy(agent, &namespace, generation, egress),
            &agent.installation_id,
            "networkpolicies",
            cancel,
        )
        .map(drop)
    }

    fn remove_egress_policy(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let Some(namespace) =
            self.runtime_namespace(&agent.installation_id, &agent.namespace_id, cancel)?
        else {
            return Ok(());
        };
        self.delete_owned(
            &format!(
                "{NETWORKING}/namespaces/{namespace}/networkpolicies/{}",
                sandbox::egress_policy_name(&agent.agent_id)
            ),
            &agent.installation_id,
            "networkpolicies",
            cancel,
        )
        .map(drop)
    }
}
