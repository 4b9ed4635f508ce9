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

    /// Points the Agent Service at `revision` (or at nothing). A Service the driver knows (it
    /// made or read it within `KNOWN_FOR`, so it is owned) and remembers routing elsewhere is
    /// patched without a read, one it remembers routing there is left alone, and the patch's
    /// answer is the route remembered; an unknown one is created first (409 reads it,
    /// and an unowned one is refused), and patched when it routes elsewhere.
    pub(super) fn route(
        &self,
        revision: &RevisionSpec,
        to: Option<&str>,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let agent = manifests::agent_of(revision);
        let namespace = self.namespace_of(&agent.installation_id, &agent.namespace_id, cancel)?;
        let path = Self::service_path(&agent, &namespace);
        let wanted = manifests::route_selector(&agent, to);
        let patch = json!({"spec": {"selector": wanted}});
        if self.is_known(&path) {
            // Routed so by this process's last write or read: nothing to change.
            if self.remembered_route(&path).is_some_and(|s| s == wanted) {
                return Ok(());
            }
            match self.client.merge_patch(&path, &patch, cancel) {
                Ok(service) => {
                    self.remember_route(&path, &service);
                    return Ok(());
                }
                // Deleted behind the driver's back: made again below.
                Err(e) if *e.kind() == KubeErrorKind::NotFound => self.forget(&path),
                Err(e) => return Err(fail(e, "services")),
            }
        }
        let service = self.create_absent(
            &format!("{CORE}/namespaces/{namespace}/services"),
            &manifests::service(&agent, &namespace),
            &agent.installation_id,
            "services",
            cancel,
        )?;
        if service["spec"]["selector"] == wanted {
            self.remember_route(&path, &service);
            return Ok(());
        }
        let service = self
            .client
            .merge_patch(&path, &patch, cancel)
            .map_err(|e| fail(e, "services"))?;
        self.remember_route(&path, &service);
        Ok(())
    }

    /// Whether the Agent Service routes `revision` and has a ready endpoint: the route as
    /// remembered (`routes`), read only when the driver has none within `KNOWN_FOR`.
    pub(super) fn routed_and_ready(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<Option<bool>, ComputeError> {
        let agent = manifests::agent_of(revision);
        let path = Self::service_path(&agent, namespace);
        // The route as this process last wrote or read it (`routes`), else read.
        let selector = match self.remembered_route(&path) {
            Some(selector) => Some(selector),
            None => {
                let service = self
                    .client
                    .get(&path, cancel)
                    .map_err(|e| fail(e, "services"))?;
                if let Some(service) = &service {
                    self.remember_route(&path, service);
                }
                service.map(|s| s["spec"]["selector"].clone())
            }
        };
        let routed = selector
            .is_some_and(|s| s == manifests::route_selector(&agent, Some(&revision.revision_id)));
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
