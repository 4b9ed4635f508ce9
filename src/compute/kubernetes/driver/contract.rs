//! `ComputeDriver` and `DriverPolicy` for `KubernetesDriver` (SPEC C1, C3): each call of the
//! contract as the flow in `driver`'s header describes it, and the driver's pure answers.

use super::*;
use crate::compute::{HarnessMode, HarnessState, RepositoryRuntime, RepositoryWithdrawal};

impl ComputeDriver for KubernetesDriver {
    fn id(&self) -> &str {
        "kubernetes"
    }

    fn implementation(&self) -> &str {
        "kubernetes"
    }

    /// The API server answers `/version`, and a SelfSubjectAccessReview allows every verb
    /// the driver uses; each denial is a warning `KUBERNETES_ACCESS_DENIED` naming it in the
    /// code (`…_CREATE_DEPLOYMENTS`). Production refuses to start on any warning.
    fn preflight(&self, cancel: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        let version = self
            .client
            .get("/version", cancel)
            .map_err(|e| fail(e, "version"))?;
        if version
            .as_ref()
            .and_then(|v| v["gitVersion"].as_str())
            .is_none()
        {
            return Err(ComputeError::permanent(
                "KUBERNETES_VERSION_UNKNOWN",
                "kubernetes",
                None,
            ));
        }
        let mut warnings = Vec::new();
        for (verb, group, resource) in ACCESS {
            let mut attributes = json!({"verb": verb, "group": group, "resource": resource});
            if let Some((resource, subresource)) = resource.split_once('/') {
                attributes["resource"] = json!(resource);
                attributes["subresource"] = json!(subresource);
            }
            let review = json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes},
            });
            let answer = self
                .client
                .post(
                    &format!("{AUTHORIZATION}/selfsubjectaccessreviews"),
                    &review,
                    cancel,
                )
                .map_err(|e| fail(e, "selfsubjectaccessreviews"))?;
            if answer["status"]["allowed"].as_bool() != Some(true) {
                warnings.push(PreflightWarning {
                    code: format!(
                        "KUBERNETES_ACCESS_DENIED_{}_{}",
                        verb.to_ascii_uppercase(),
                        resource.to_ascii_uppercase().replace('/', "_")
                    ),
                });
            }
        }
        self.check_runtime_class(cancel)?;
        Ok(warnings)
    }

    fn ensure_namespace(
        &self,
        spec: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        let name = self.namespace_name(spec);
        let path = format!("{CORE}/namespaces/{name}");
        let adopted = spec.existing_namespace.is_some();
        let current = match self
            .client
            .get(&path, cancel)
            .map_err(|e| fail(e, "namespaces"))?
        {
            Some(current) => current,
            None if adopted => {
                return Err(ComputeError::permanent(
                    "EXISTING_NAMESPACE_NOT_FOUND",
                    "kubernetes",
                    Some(404),
                ))
            }
            None => self.create_absent(
                &format!("{CORE}/namespaces"),
                &manifests::namespace(spec, &name),
                &spec.installation_id,
                "namespaces",
                cancel,
            )?,
        };
        if observe::terminating(&current) {
            return Ok(Self::namespace_observation(
                spec,
                Some("NAMESPACE_TERMINATING"),
            ));
        }
        let labels = &current["metadata"]["labels"];
        let ours = labels[LABEL_NAMESPACE].as_str()
            == Some(names::label_value(&spec.namespace_id).as_str());
        if owned(&current, &spec.installation_id) && !ours {
            // Another Namespace of this installation holds the name.
            return Err(ComputeError::permanent(
                "NAMESPACE_NAME_CONFLICT",
                "kubernetes",
                None,
            ));
        }
        if !owned(&current, &spec.installation_id) {
            if !adopted || labels.get(LABEL_INSTALLATION).is_some() {
                return Err(ComputeError::permanent(
                    "NAMESPACE_NAME_CONFLICT",
                    "kubernetes",
                    None,
                ));
            }
            // Adoption adds the ownership labels, nothing else.
            let patch = json!({"metadata": {"labels": manifests::adoption_labels(spec)}});
            self.client
                .merge_patch(&path, &patch, cancel)
                .map_err(|e| fail(e, "namespaces"))?;
        }
        self.namespaces
            .lock()
            .insert(spec.namespace_id.clone(), name.clone());
        self.converge(
            &format!("{NETWORKING}/namespaces/{name}/networkpolicies"),
            &manifests::default_deny(spec, &name, &self.settings.api_server_cidrs),
            &spec.installation_id,
            "networkpolicies",
            cancel,
        )?;
        let binding = format!(
            "{RBAC}/namespaces/{name}/rolebindings/{}",
            self.settings.tenant_role_binding
        );
        if self
            .client
            .get(&binding, cancel)
            .map_err(|e| fail(e, "rolebindings"))?
            .is_none()
        {
            return Ok(Self::namespace_observation(
                spec,
                Some("NAMESPACE_ROLEBINDING_PENDING"),
            ));
        }
        // Otherwise ready: the hooks are the last word before it is reported so (SPEC H3).
        self.hooks.run(
            Phase::AfterNamespacePrepared,
            &self.namespace_subject(spec),
            &[],
            cancel,
        )?;
        Ok(Self::namespace_observation(spec, None))
    }

    fn delete_namespace(
        &self,
        spec: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        let name = self.namespace_name(spec);
        let path = format!("{CORE}/namespaces/{name}");
        // Nothing inside a namespace being emptied is known to exist any more.
        self.forget_namespace(&name);
        let Some(current) = self
            .client
            .get(&path, cancel)
            .map_err(|e| fail(e, "namespaces"))?
        else {
            self.namespaces.lock().remove(&spec.namespace_id);
            return Ok(Self::namespace_observation(spec, None));
        };
        if spec.existing_namespace.is_some() {
            // An adopted namespace is never deleted: only what the driver made inside it, and
            // then the ownership labels adoption added, so another Namespace (or a new one of
            // the same name) can adopt it again.
            let terminating = observe::terminating(&current);
            if !terminating {
                self.before_namespace_delete(spec, cancel)?;
            }
            if terminating || self.empty_adopted(spec, &name, cancel)? {
                self.release_adopted(spec, &path, &current, cancel)?;
                self.namespaces.lock().remove(&spec.namespace_id);
                return Ok(Self::namespace_observation(spec, None));
            }
            return Ok(Self::namespace_observation(
                spec,
                Some("NAMESPACE_OBJECTS_REMOVAL_PENDING"),
            ));
        }
        let ours = current["metadata"]["labels"][LABEL_NAMESPACE].as_str()
            == Some(names::label_value(&spec.namespace_id).as_str());
        if !owned(&current, &spec.installation_id) || !ours {
            // Not ours: nothing of this Namespace is left to delete.
            return Ok(Self::namespace_observation(spec, None));
        }
        if !observe::terminating(&current) {
            self.before_namespace_delete(spec, cancel)?;
            match self.client.delete(&path, Some("Background"), cancel) {
                Ok(None) => return Ok(Self::namespace_observation(spec, None)),
                Ok(Some(_)) => {}
                // A second delete of a terminating namespace answers 409.
                Err(e) if *e.kind() == KubeErrorKind::Conflict => {}
                Err(e) => return Err(fail(e, "namespaces")),
            }
        }
        Ok(Self::namespace_observation(
            spec,
            Some("NAMESPACE_TERMINATING"),
        ))
    }

    /// The Agent's ServiceAccount (no automounted token) and its Service (routing nothing until
    /// a revision activates) exist; the Service's selector, as created or read, is remembered
    /// (`routes`). The Agent's NetworkPolicy (gateway to Harness) comes with its first dedicated
    /// revision (`prepare_revision`): an embedded Agent has no Harness Pod for it to open.
    fn bind_agent(&self, agent: &AgentSpec, cancel: &CancelToken) -> Result<(), ComputeError> {
        let namespace = self.namespace_of(&agent.installation_id, &agent.namespace_id, cancel)?;
        self.ensure_exists(
            &format!("{CORE}/namespaces/{namespace}/serviceaccounts"),
            &manifests::service_account(agent, &namespace),
            &agent.installation_id,
            "serviceaccounts",
            cancel,
        )?;
        if let Some(service) = self.ensure_exists(
            &format!("{CORE}/namespaces/{namespace}/services"),
            &manifests::service(agent, &namespace),
            &agent.installation_id,
            "services",
            cancel,
        )? {
            self.remember_route(&Self::service_path(agent, &namespace), &service);
        }
        Ok(())
    }

    /// Dedicated: writes the revision's Harness Deployment and Service (and the Agent's Harness
    /// claim and NetworkPolicy) and points the Agent's gateway at it in one pass, then observes
    /// both rollouts (one Deployment list, from the second pass on); the Agent Service routes
    /// the gateway at activation (SPEC C3). Every predecessor was stopped first (exclusive
    /// replacement, R8), so the gateway served nothing while its Harness rolled out.
    /// Embedded: while the Agent's shared gateway runs another revision the candidate is only
    /// validated (image, Secret references) and reported ready; the worker then activates it
    /// before the pointer commit (`activates_before_commit`), which replaces the gateway and
    /// checks its rollout, and commits only once it completed (SPEC C3: the Recreate gateway
    /// is replaced and checked during activation). Once the gateway runs the candidate, its
    /// preparation observes the gateway's rollout and readiness like any workload's.
    fn prepare_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        self.forget_seen(cancel);
        let (namespace, desired) = self.desired_workload(revision, cancel)?;
        if revision.harness_mode != HarnessMode::Dedicated {
            // The shared gateway: an unknown one is created running the candidate (409 reads
            // it); one running another revision is left to the activation.
            let current = self.current_workload(revision, &namespace, &desired, cancel)?;
            if !Self::runs(&current.0, revision) {
                return Ok(observation(revision, true));
            }
            let gateway = self.run_workload(revision, &namespace, &desired, current, cancel)?;
            if let Some(unready) = self.rolled_out(revision, &namespace, &gateway, cancel)? {
                return Ok(unready);
            }
        } else {
            let agent = manifests::agent_of(revision);
            self.ensure_exists(
                &format!("{CORE}/namespaces/{namespace}/persistentvolumeclaims"),
                &manifests::harness_claim(&agent, &namespace, &self.settings),
                &revision.installation_id,
                "persistentvolumeclaims",
                cancel,
            )?;
            self.ensure_exists(
                &format!("{NETWORKING}/namespaces/{namespace}/networkpolicies"),
                &manifests::agent_network_policy(&agent, &namespace),
                &revision.installation_id,
                "networkpolicies",
                cancel,
            )?;
            let gateway = self.desired_gateway(revision, &namespace)?;
            let harness_path = self.workload_path(revision, &namespace);
            let gateway_path = Self::gateway_path(revision, &namespace);
            self.list_workloads(
                revision,
                &namespace,
                &[&harness_path, &gateway_path],
                cancel,
            )?;
            let harness = self.write_workload(revision, &namespace, &desired, cancel)?;
            self.ensure_exists(
                &format!("{CORE}/namespaces/{namespace}/services"),
                &manifests::harness_service(revision, &namespace),
                &revision.installation_id,
                "services",
                cancel,
            )?;
            let gateway = self.write_workload(revision, &namespace, &gateway, cancel)?;
            for workload in [&harness, &gateway] {
                if let Some(unready) = self.rolled_out(revision, &namespace, workload, cancel)? {
                    return Ok(unready);
                }
            }
        }
        // A routed revision is ready only with a ready endpoint behind the Agent Service.
        let endpoint = self.routed_and_ready(revision, &namespace, cancel)?;
        Ok(observation(revision, endpoint != Some(false)))
    }

    fn deactivate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.route(revision, None, cancel)
    }

    /// Points the Agent Service at the revision. An embedded revision first takes the shared
    /// gateway (Recreate) and is routed once that rollout completes; until then activation is
    /// pending (`REVISION_ACTIVATION_PENDING`) and the next pass, the revision now
    /// active, observes the gateway and activates again (R7).
    fn activate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let activated = self.activate(revision, cancel);
        self.forget_seen(cancel);
        activated
    }

    /// Scales the Agent's gateway to zero while it serves the revision, then, for a dedicated
    /// revision and only once the gateway's Pods are gone, the Harness Deployment: the Harness
    /// (and its ReadWriteOnce claim) is released after nothing fronts it any more. Pending
    /// (draining) until every Pod of the revision is gone.
    fn stop_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        // No namespace, no runtime.
        let Some(namespace) =
            self.runtime_namespace(&revision.installation_id, &revision.namespace_id, cancel)?
        else {
            return Ok(());
        };
        let before = BeforeStop::new(self, revision);
        self.scale_down(
            revision,
            &Self::gateway_path(revision, &namespace),
            &before,
            cancel,
        )?;
        let pods = self.pods(&namespace, &Self::revision_pods(revision), cancel)?;
        if revision.harness_mode == HarnessMode::Dedicated {
            let gateway_left = pods
                .iter()
                .any(|p| p["metadata"]["labels"][LABEL_COMPONENT] == manifests::COMPONENT_GATEWAY);
            if gateway_left {
                return Err(draining());
            }
            self.scale_down(
                revision,
                &self.workload_path(revision, &namespace),
                &before,
                cancel,
            )?;
        }
        if pods.is_empty() {
            Ok(())
        } else {
            Err(draining())
        }
    }

    /// Deletes the revision's runtime: the Agent's gateway while it serves the revision, and a
    /// dedicated revision's Harness Deployment and Service.
    fn retire_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        // No namespace, no runtime.
        let Some(namespace) =
            self.runtime_namespace(&revision.installation_id, &revision.namespace_id, cancel)?
        else {
            return Ok(());
        };
        let installation = &revision.installation_id;
        let before = BeforeStop::new(self, revision);
        self.delete_owned_if(
            &Self::gateway_path(revision, &namespace),
            installation,
            "deployments",
            |gateway| Self::runs(gateway, revision),
            Some(&before),
            cancel,
        )?;
        if revision.harness_mode == HarnessMode::Dedicated {
            let name = names::revision_object_name(&revision.agent_id, revision.revision);
            // Every object is tried: the first failure decides the outcome, and a later one is
            // its failed cleanup (`cleanupCause`, SPEC W7). A hook refusal or a cancelled
            // call ends the retirement at once.
            let mut failed: Option<ComputeError> = None;
            for (path, resource) in [
                (self.workload_path(revision, &namespace), "deployments"),
                (
                    format!("{CORE}/namespaces/{namespace}/services/{name}"),
                    "services",
                ),
            ] {
                let Err(e) = self.delete_owned_if(
                    &path,
                    installation,
                    resource,
                    |_| true,
                    Some(&before),
                    cancel,
                ) else {
                    continue;
                };
                let ends = e.class() == "lifecycle_hook"
                    || matches!(e.kind(), crate::compute::ComputeErrorKind::Cancelled(_));
                failed = Some(match failed {
                    None if ends => return Err(e),
                    None => e,
                    Some(primary) if primary.cleanup_class().is_none() => {
                        primary.with_failed_cleanup(e.class())
                    }
                    Some(primary) => primary,
                });
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Removes the Agent's own objects: its ServiceAccount (its runtime identity), Service,
    /// gateway, NetworkPolicy and Harness claim.
    fn delete_agent_runtime_credentials(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        // No namespace, nothing of the Agent's left.
        let Some(namespace) =
            self.runtime_namespace(&agent.installation_id, &agent.namespace_id, cancel)?
        else {
            return Ok(());
        };
        let object = names::agent_object_name(&agent.agent_id);
        for (path, resource) in [
            (
                format!(
                    "{APPS}/namespaces/{namespace}/deployments/{}",
                    manifests::gateway_name(&agent.agent_id)
                ),
                "deployments",
            ),
            (
                format!("{CORE}/namespaces/{namespace}/services/{object}"),
                "services",
            ),
            (
                format!(
                    "{CORE}/namespaces/{namespace}/persistentvolumeclaims/{}",
                    manifests::harness_claim_name(&agent.agent_id)
                ),
                "persistentvolumeclaims",
            ),
            (
                format!("{NETWORKING}/namespaces/{namespace}/networkpolicies/{object}"),
                "networkpolicies",
            ),
            (
                format!("{CORE}/namespaces/{namespace}/serviceaccounts/{object}"),
                "serviceaccounts",
            ),
        ] {
            self.delete_owned(&path, &agent.installation_id, resource, cancel)?;
        }
        Ok(())
    }

    fn policy(&self) -> &dyn DriverPolicy {
        self
    }

    /// The passes the client's rate limit serves now without a wait (SPEC Q10): under the shipped limit a fleet rollout claims as many
    /// works as the limit serves instead of holding claims while their requests queue.
    fn claim_capacity(&self) -> Option<usize> {
        Some(self.client.passes_within_rate_limit())
    }

    /// The egress NetworkPolicies of the built-in `kubernetes-sandbox` (SPEC S3): offered
    /// whether or not the Installation selects it, since an Agent's policy is removed either
    /// way; without a selection `apply_egress_policy` refuses `SANDBOX_DRIVER_UNAVAILABLE`.
    fn sandbox(&self) -> Option<&dyn SandboxDriver> {
        Some(self)
    }

    /// The built-in `kubernetes-secret-gateway` (SPEC §13, E6).
    fn credential_gateway(&self) -> Option<&dyn CredentialGateway> {
        Some(self)
    }

    /// The Harness (dedicated) or gateway (embedded) reads Git material from Secrets of the
    /// Agent's namespace (SPEC G11).
    fn repository(&self) -> Option<&dyn RepositoryRuntime> {
        Some(self)
    }
}

impl RepositoryRuntime for KubernetesDriver {
    fn runtime_namespace(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<String, ComputeError> {
        self.namespace_of(&revision.installation_id, &revision.namespace_id, cancel)
    }

    /// SPEC G14 (Kubernetes): the revision's workload is written without its Git variables (a
    /// rollout when it runs), then `Pending` while a Pod or live ReplicaSet of the revision
    /// still carries material, else `Withdrawn`. No workload (or no namespace) carries
    /// nothing. A workload without this installation's labels is refused; a 409 is read again
    /// once, then retryable. The material Secrets are never read, written or deleted.
    fn retire_expired_repository_access(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<RepositoryWithdrawal, ComputeError> {
        let Some(namespace) =
            self.runtime_namespace(&revision.installation_id, &revision.namespace_id, cancel)?
        else {
            return Ok(RepositoryWithdrawal::Withdrawn);
        };
        let path = self.workload_path(revision, &namespace);
        for _ in 0..2 {
            if let Some(workload) = self.revision_workload(revision, &path, cancel)? {
                if !owned(&workload, &revision.installation_id) {
                    return Err(ComputeError::permanent(
                        "REPOSITORY_WITHDRAWAL_MISCONFIGURED",
                        "kubernetes",
                        None,
                    ));
                }
                if manifests::carries_git_material(&workload["spec"]["template"]["spec"]) {
                    let replacement = manifests::without_git(workload);
                    match self.client.replace(&path, &replacement, cancel) {
                        Ok(_) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                KubeErrorKind::Conflict | KubeErrorKind::NotFound
                            ) =>
                        {
                            continue
                        }
                        Err(e) => return Err(fail(e, "deployments")),
                    }
                }
            }
            let carries = self.runtime_carries_with(
                revision,
                &namespace,
                manifests::carries_git_material,
                cancel,
            )?;
            return Ok(if carries {
                RepositoryWithdrawal::Pending
            } else {
                RepositoryWithdrawal::Withdrawn
            });
        }
        Err(ComputeError::retryable("kubernetes_conflict", Some(409)).with_reason("Conflict"))
    }

    /// SPEC G15 (Kubernetes): from the revision's Harness Pods (the gateway's while it runs an
    /// embedded revision): a Ready Pod is `running`, a Pending or unready one `starting`, a
    /// Failed one or none at all `lost`.
    fn observe_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<HarnessState, ComputeError> {
        let Some(namespace) =
            self.runtime_namespace(&revision.installation_id, &revision.namespace_id, cancel)?
        else {
            return Ok(HarnessState::Lost);
        };
        let pods = self.pods(&namespace, &Self::revision_pods(revision), cancel)?;
        let live: Vec<&Value> = pods
            .iter()
            .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
            .collect();
        let ready = |p: &Value| {
            p["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        };
        Ok(if live.iter().any(|p| ready(p)) {
            HarnessState::Running
        } else if live
            .iter()
            .any(|p| matches!(p["status"]["phase"].as_str(), Some("Pending" | "Running")))
        {
            HarnessState::Starting
        } else {
            HarnessState::Lost
        })
    }

    /// SPEC G15 (Kubernetes): the sorted uids of the Pods running the revision.
    fn verify_repository_execution(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<Value, ComputeError> {
        let Some(namespace) =
            self.runtime_namespace(&revision.installation_id, &revision.namespace_id, cancel)?
        else {
            return Ok(json!([]));
        };
        let pods = self.pods(&namespace, &Self::revision_pods(revision), cancel)?;
        let mut uids: Vec<&str> = pods
            .iter()
            .filter(|p| {
                p["metadata"].get("deletionTimestamp").is_none()
                    && p["status"]["phase"] == "Running"
            })
            .filter_map(|p| p["metadata"]["uid"].as_str())
            .collect();
        uids.sort_unstable();
        Ok(json!(uids))
    }
}

impl KubernetesDriver {
    /// `activate_revision`'s steps, using what the pass's preparation just saw.
    fn activate(&self, revision: &RevisionSpec, cancel: &CancelToken) -> Result<(), ComputeError> {
        if revision.harness_mode != HarnessMode::Dedicated {
            let (namespace, desired) = self.desired_workload(revision, cancel)?;
            self.before_gateway_takeover(revision, &namespace, cancel)?;
            let (gateway, _) = self.write_workload(revision, &namespace, &desired, cancel)?;
            match observe::rollout(&gateway) {
                Rollout::Failed | Rollout::Progressing => {
                    return Err(ComputeError::pending(
                        "REVISION_ACTIVATION_PENDING",
                        "kubernetes_gateway_rollout",
                        None,
                    )
                    .with_reason("RolloutPending"))
                }
                Rollout::Complete => {}
            }
        }
        self.route(revision, Some(&revision.revision_id), cancel)
    }
}

impl DriverPolicy for KubernetesDriver {
    /// A production worker runs dedicated Codex and embedded OpenClaw only.
    fn accepts_harness(&self, harness_id: &str, mode: HarnessMode) -> bool {
        !self.production || crate::compute::PRODUCTION_HARNESSES.contains(&(harness_id, mode))
    }

    /// Dedicated harnesses share the Agent's ReadWriteOnce claim: every earlier runtime stops
    /// first (exclusive replacement).
    fn requires_stopped_predecessors(&self, revision: &RevisionSpec) -> bool {
        revision.harness_mode == HarnessMode::Dedicated
    }

    fn maintenance_interval(&self) -> Option<Duration> {
        self.settings.maintenance_interval
    }

    /// An embedded revision replaces and checks the Agent's shared gateway before its pointer
    /// commit: its preparation beside another revision's gateway observes nothing.
    fn activates_before_commit(&self, revision: &RevisionSpec) -> bool {
        revision.harness_mode == HarnessMode::Embedded
    }

    /// The settings' `executionAdmissions` list the pairs this driver runs (SPEC Z1).
    fn validate_execution_admission(
        &self,
        revision: &RevisionSpec,
        _purpose: AdmissionUse,
    ) -> Result<(), ComputeError> {
        if self
            .settings
            .execution_admissions
            .contains(&revision.execution_admission)
        {
            Ok(())
        } else {
            Err(execution_admission_unavailable())
        }
    }

    /// A rejected active execution is withdrawn by stopping the revision: a stop still draining
    /// is not withdrawn yet, so it counts as failed and the worker waits (SPEC Z1).
    fn rejected_execution_withdrawal<'a>(
        &'a self,
        revision: &'a RevisionSpec,
    ) -> Option<Withdrawal<'a>> {
        Some(Box::new(move |cancel| self.stop_revision(revision, cancel)))
    }

    /// The Agent's ServiceAccount is its runtime credential; `delete_agent_runtime_credentials`
    /// removes it (SPEC Z11).
    fn runtime_credentials(&self) -> RuntimeCredentials {
        RuntimeCredentials::ProvisionedAndDeleted
    }

    /// All four phases (SPEC H2, H3).
    fn lifecycle_hooks(&self) -> Option<&LifecycleHooks> {
        Some(&self.hooks)
    }

    /// Only a dedicated Harness has a persistent workspace (its claim) for the setup's init
    /// container, and only when the driver file names `workspaceSetupImage` (SPEC WS2).
    fn supports_workspace_setup(&self, revision: &RevisionSpec) -> bool {
        revision.harness_mode == HarnessMode::Dedicated
            && self.settings.workspace_setup_image.is_some()
    }

    /// SPEC G10: the Git material reaches the Harness (dedicated) or the gateway (embedded) of
    /// a revision that pins the selected Sandbox Driver, whose facets keep it there; any other
    /// recipient is unverified.
    fn validate_repository_credentials(
        &self,
        revision: &RevisionSpec,
        sandbox_driver_id: Option<&str>,
    ) -> Option<Result<(), ComputeError>> {
        let pinned = revision.sandbox_driver_id.as_deref();
        Some(if pinned.is_some() && pinned == sandbox_driver_id {
            Ok(())
        } else {
            Err(ComputeError::permanent(
                crate::compute::policy::REPOSITORY_RECIPIENT_UNVERIFIED,
                "repository_credentials",
                None,
            ))
        })
    }
}
