//! The Agent's route (SPEC C3, R8): the Agent Service pointed at a revision's gateway Pods, and
//! whether it routes to ready ones.

use super::*;

impl KubernetesDriver {
    /// The Agent Service, which `bind_agent` created.
    pub(super) fn service_path(agent: &AgentSpec, namespace: &str) -> String {
        format!(
            "{CORE}/namespaces/{namespace}/services/{}",
            names::agent_object_name(&agent.agent_id)
        )
    }

    /// Points the Agent Service at `revision` (or at nothing).
    pub(super) fn route(
        &self,
        revision: &RevisionSpec,
        to: Option<&str>,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let agent = manifests::agent_of(revision);
        let namespace = self.namespace_of(&agent.installation_id, &agent.namespace_id, cancel)?;
        let service = self.create_absent(
            &format!("{CORE}/namespaces/{namespace}/services"),
            &manifests::service(&agent, &namespace),
            &agent.installation_id,
            "services",
            cancel,
        )?;
        let wanted = manifests::route_selector(&agent, to);
        if service["spec"]["selector"] == wanted {
            return Ok(());
        }
        let patch = json!({"spec": {"selector": wanted}});
        self.client
            .merge_patch(&Self::service_path(&agent, &namespace), &patch, cancel)
            .map_err(|e| fail(e, "services"))?;
        Ok(())
    }

    /// Whether the Agent Service routes `revision` and has a ready endpoint.
    pub(super) fn routed_and_ready(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<Option<bool>, ComputeError> {
        let agent = manifests::agent_of(revision);
        let service = self
            .client
            .get(&Self::service_path(&agent, namespace), cancel)
            .map_err(|e| fail(e, "services"))?;
        let routed = service.is_some_and(|s| {
            s["spec"]["selector"] == manifests::route_selector(&agent, Some(&revision.revision_id))
        });
        if !routed {
            return Ok(None);
        }
        let slices = self
            .client
            .list(
                &format!("{DISCOVERY}/namespaces/{namespace}/endpointslices"),
                Some(&format!(
                    "kubernetes.io/service-name={}",
                    names::agent_object_name(&agent.agent_id)
                )),
                cancel,
            )
            .map_err(|e| fail(e, "endpointslices"))?;
        Ok(Some(observe::has_ready_endpoint(&slices)))
    }
}
