//! A revision's workloads (SPEC C3, R5, S2, Z5): the Harness Deployment and the Agent's gateway
//! as this driver writes them, their rollouts, their Pods, scaling them down, and the held
//! failure a harness reports behind its `/readyz`. Methods of `KubernetesDriver` that the
//! contract (`contract`) calls; they never delete an object without this installation's
//! labels.

use super::*;
use crate::compute::spec::Facet;
use crate::compute::HarnessMode;

impl KubernetesDriver {
    pub(super) fn pods(
        &self,
        namespace: &str,
        labels: &str,
        cancel: &CancelToken,
    ) -> Result<Vec<Value>, ComputeError> {
        self.client
            .list(
                &format!("{CORE}/namespaces/{namespace}/pods"),
                Some(labels),
                cancel,
            )
            .map_err(|e| fail_within_quota(e, "pods", "NAMESPACE_POD_QUOTA_EXCEEDED"))
    }

    /// The revision's namespace and the workload it should run (its image must be configured),
    /// with the launch values the `beforeWorkloadStart` hooks answered: they are asked here,
    /// before the workload is written, and a refusal writes nothing (SPEC H3-H5).
    pub(super) fn desired_workload(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(String, Value), ComputeError> {
        let image = self
            .settings
            .image_for(
                &revision.harness_id,
                &revision.harness_version,
                revision.harness_mode,
            )
            .ok_or_else(|| {
                ComputeError::permanent("HARNESS_IMAGE_UNAVAILABLE", "kubernetes", None)
            })?
            .to_string();
        let namespace =
            self.namespace_of(&revision.installation_id, &revision.namespace_id, cancel)?;
        // A credential source outside the Agent's namespace refuses the revision before the
        // hooks are asked or anything is written (SPEC §13).
        manifests::credential_sources_hold(revision, &namespace)?;
        self.facets_hold(revision, &namespace, cancel)?;
        let taken: Vec<&str> = revision
            .secrets
            .iter()
            .map(|s| s.binding.as_str())
            .collect();
        let launch = self.hooks.run(
            Phase::BeforeWorkloadStart,
            &self.workload_subject(revision),
            &taken,
            cancel,
        )?;
        let desired = manifests::workload(
            revision,
            &namespace,
            &image,
            &launch,
            &self.settings,
            self.progress_deadline_seconds,
        )?;
        let desired = self.enforce(revision, desired)?;
        Ok((namespace, desired))
    }

    /// The revision's pinned facets hold in its namespace (SPEC S2): each is one the Sandbox
    /// Driver offers, the namespace enforces the restricted Pod Security level, and its
    /// default-deny NetworkPolicy exists. Read before anything of the revision is written; one
    /// that does not hold refuses the revision, permanent `SANDBOX_FACET_UNAVAILABLE`.
    pub(super) fn facets_hold(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let pinned = &revision.sandbox_facets;
        sandbox::offered(pinned, self.sandbox.as_ref())?;
        if pinned.contains(&Facet::PodSecurityRestricted) {
            let current = self
                .client
                .get(&format!("{CORE}/namespaces/{namespace}"), cancel)
                .map_err(|e| fail(e, "namespaces"))?;
            if !current.is_some_and(|n| sandbox::namespace_restricted(&n)) {
                return Err(sandbox::facet_unavailable());
            }
        }
        if pinned.contains(&Facet::DefaultDenyEgress) {
            let path = format!(
                "{NETWORKING}/namespaces/{namespace}/networkpolicies/{}",
                manifests::DEFAULT_DENY
            );
            if self
                .get_owned(&path, &revision.installation_id, "networkpolicies", cancel)?
                .is_none()
            {
                return Err(sandbox::facet_unavailable());
            }
        }
        Ok(())
    }

    /// `desired` with the revision's pinned facets applied, refused with
    /// `SANDBOX_FACET_UNAVAILABLE` when the workload would not enforce one (SPEC S2).
    pub(super) fn enforce(
        &self,
        revision: &RevisionSpec,
        desired: Value,
    ) -> Result<Value, ComputeError> {
        let pinned = &revision.sandbox_facets;
        let desired = sandbox::apply(desired, pinned, self.sandbox.as_ref());
        if sandbox::workload_enforces(&desired, pinned, self.sandbox.as_ref()) {
            Ok(desired)
        } else {
            Err(sandbox::facet_unavailable())
        }
    }

    /// The Agent's Deployments, read with one list when the pass will write or observe one the
    /// driver knows: each is then seen by the pass (`seen`), and each of `paths` the list does
    /// not show is seen absent. Nothing is read while the driver knows none of `paths` (its
    /// first revision: they are created first, and the creates' answers are the observations).
    pub(super) fn list_workloads(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        paths: &[&str],
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        if !paths.iter().any(|p| self.is_known(p) || self.was_known(p)) {
            return Ok(());
        }
        let collection = format!("{APPS}/namespaces/{namespace}/deployments");
        let listed = self
            .client
            .list(
                &collection,
                Some(&selector(&[(
                    LABEL_AGENT,
                    names::label_value(&revision.agent_id),
                )])),
                cancel,
            )
            .map_err(|e| fail(e, "deployments"))?;
        for workload in &listed {
            self.saw(
                &format!("{collection}/{}", name_of(workload)),
                Some(workload),
                cancel,
            );
        }
        for path in paths {
            if self.seen_in_pass(path, cancel).is_none() {
                self.saw(path, None, cancel);
            }
        }
        Ok(())
    }

    /// The Deployment at `path` as this pass saw it, else read (and seen by the pass); one
    /// without this installation's labels is refused.
    pub(super) fn workload_now(
        &self,
        path: &str,
        installation_id: &str,
        cancel: &CancelToken,
    ) -> Result<Option<Value>, ComputeError> {
        let current = match self.seen_in_pass(path, cancel) {
            Some(seen) => seen,
            None => {
                let read = self
                    .client
                    .get(path, cancel)
                    .map_err(|e| fail(e, "deployments"))?;
                self.saw(path, read.as_ref(), cancel);
                read
            }
        };
        if current.as_ref().is_some_and(|c| !owned(c, installation_id)) {
            return Err(not_owned());
        }
        Ok(current)
    }

    /// The Deployment `desired` names as it is now: as this pass saw it, else created when the
    /// pass saw it absent or the driver never knew it (the create's answer is the observation;
    /// 409 reads it), else read. Answers the object and whether this call wrote it.
    pub(super) fn current_workload(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        desired: &Value,
        cancel: &CancelToken,
    ) -> Result<(Value, bool), ComputeError> {
        let collection = format!("{APPS}/namespaces/{namespace}/deployments");
        let path = format!("{collection}/{}", name_of(desired));
        let installation = &revision.installation_id;
        let seen = self.seen_in_pass(&path, cancel);
        if let Some(Some(current)) = seen {
            if !owned(&current, installation) {
                return Err(not_owned());
            }
            self.remember(&path);
            return Ok((current, false));
        }
        if seen.is_some() {
            // Listed absent in this pass: created, not read again.
            self.forget(&path);
        }
        let (current, written) =
            self.create_or_read(&collection, desired, installation, "deployments", cancel)?;
        self.saw(&path, Some(&current), cancel);
        Ok((current, written))
    }

    /// `run_workload` from the Deployment as it is now (`current_workload`).
    pub(super) fn write_workload(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        desired: &Value,
        cancel: &CancelToken,
    ) -> Result<(Value, bool), ComputeError> {
        let current = self.current_workload(revision, namespace, desired, cancel)?;
        self.run_workload(revision, namespace, desired, current, cancel)
    }

    /// Converges a Deployment from `current` (`current_workload`) to `desired` and makes sure it
    /// runs one replica: a stop scaled it to zero without changing its stamp (a refused
    /// candidate whose refusal was lifted, a gateway stopped with its Agent). Answers the
    /// Deployment as stored, seen by the pass, and whether it was written (here or by
    /// `current_workload`, `written`).
    pub(super) fn run_workload(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        desired: &Value,
        (current, written): (Value, bool),
        cancel: &CancelToken,
    ) -> Result<(Value, bool), ComputeError> {
        let collection = format!("{APPS}/namespaces/{namespace}/deployments");
        let path = format!("{collection}/{}", name_of(desired));
        let version = current["metadata"]["resourceVersion"].clone();
        let workload = self.converge_from(
            &collection,
            desired,
            current,
            &revision.installation_id,
            "deployments",
            cancel,
        )?;
        let written = written || workload["metadata"]["resourceVersion"] != version;
        let (workload, written) = if workload["spec"]["replicas"].as_i64() == Some(1) {
            (workload, written)
        } else {
            let patched = self
                .client
                .merge_patch(&path, &json!({"spec": {"replicas": 1}}), cancel)
                .map_err(|e| fail(e, "deployments"))?;
            (patched, true)
        };
        self.saw(&path, Some(&workload), cancel);
        Ok((workload, written))
    }

    /// `None` once `workload` rolled out; else why the revision is not ready. A rollout
    /// Kubernetes gave up on (`ProgressDeadlineExceeded`, a Deployment written with a shorter
    /// deadline) is kept and observed like any unready one: the worker's convergence deadline
    /// decides, with the evidence. A workload this pass just wrote is not rolled out, and no
    /// Pod of what was written can be observed yet: it is pending (`REVISION_INCOMPLETE`)
    /// without a read, and the next pass observes its Pods.
    pub(super) fn rolled_out(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        (workload, written): &(Value, bool),
        cancel: &CancelToken,
    ) -> Result<Option<RevisionObservation>, ComputeError> {
        match observe::rollout(workload) {
            Rollout::Complete => Ok(None),
            _ if *written => Ok(Some(observation(revision, false))),
            Rollout::Failed => {
                let mut unready = self.unready(revision, namespace, workload, cancel)?;
                if unready.runtime_failure.is_none() {
                    unready.runtime_failure = Some(crate::compute::RuntimeFailure::new(
                        PROGRESS_DEADLINE_EXCEEDED,
                    ));
                }
                Ok(Some(unready))
            }
            Rollout::Progressing => self
                .unready(revision, namespace, workload, cancel)
                .map(Some),
        }
    }

    /// The dedicated gateway in front of `revision`'s Harness (SPEC C3).
    pub(super) fn desired_gateway(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
    ) -> Result<Value, ComputeError> {
        let image = self.settings.gateway_image.as_deref().ok_or_else(|| {
            ComputeError::permanent("HARNESS_IMAGE_UNAVAILABLE", "kubernetes", None)
        })?;
        self.enforce(
            revision,
            manifests::dedicated_gateway(
                revision,
                namespace,
                image,
                &self.settings,
                self.progress_deadline_seconds,
            ),
        )
    }

    /// Scales the Deployment at `path` to zero when it runs `revision` (any Deployment of a
    /// dedicated Harness does; the Agent's gateway only while it serves the revision).
    pub(super) fn scale_down(
        &self,
        revision: &RevisionSpec,
        path: &str,
        before: &BeforeStop<'_>,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let workload = self.get_owned(path, &revision.installation_id, "deployments", cancel)?;
        if workload
            .is_some_and(|w| Self::runs(&w, revision) && w["spec"]["replicas"].as_i64() != Some(0))
        {
            before.ask(cancel)?;
            self.client
                .merge_patch(path, &json!({"spec": {"replicas": 0}}), cancel)
                .map_err(|e| fail(e, "deployments"))?;
        }
        Ok(())
    }

    /// The Agent's gateway Deployment.
    pub(super) fn gateway_path(revision: &RevisionSpec, namespace: &str) -> String {
        format!(
            "{APPS}/namespaces/{namespace}/deployments/{}",
            manifests::gateway_name(&revision.agent_id)
        )
    }

    /// Before an embedded revision takes the Agent's shared gateway from the revision it runs,
    /// that revision's workload stops: the `beforeWorkloadStop` hooks are asked for it first
    /// (SPEC H3, H4), and a refusal leaves the gateway as it is (the activation waits with the
    /// hook's code). A gateway scaled to zero, running no revision or this one asks nothing.
    pub(super) fn before_gateway_takeover(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let gateway = self.workload_now(
            &Self::gateway_path(revision, namespace),
            &revision.installation_id,
            cancel,
        )?;
        let Some(gateway) = gateway else {
            return Ok(());
        };
        let running = gateway["spec"]["replicas"].as_i64().unwrap_or(1) > 0;
        let serving = gateway["spec"]["template"]["metadata"]["labels"][LABEL_REVISION]
            .as_str()
            .filter(|r| *r != manifests::NO_REVISION && !r.is_empty());
        let Some(previous) = serving.filter(|_| running && !Self::runs(&gateway, revision)) else {
            return Ok(());
        };
        let subject = HookSubject {
            revision_id: Some(previous),
            ..self.workload_subject(revision)
        };
        self.hooks
            .run(Phase::BeforeWorkloadStop, &subject, &[], cancel)
            .map(drop)
    }

    /// The workload path of a revision and whether it is this revision's own.
    pub(super) fn workload_path(&self, revision: &RevisionSpec, namespace: &str) -> String {
        let name = if revision.harness_mode == HarnessMode::Dedicated {
            names::revision_object_name(&revision.agent_id, revision.revision)
        } else {
            manifests::gateway_name(&revision.agent_id)
        };
        format!("{APPS}/namespaces/{namespace}/deployments/{name}")
    }

    /// The label selector of a revision's Pods.
    pub(super) fn revision_pods(revision: &RevisionSpec) -> String {
        selector(&[
            (LABEL_AGENT, names::label_value(&revision.agent_id)),
            (LABEL_REVISION, names::label_value(&revision.revision_id)),
        ])
    }

    /// Whether the workload currently runs `revision` (an embedded gateway runs one revision
    /// at a time).
    pub(super) fn runs(workload: &Value, revision: &RevisionSpec) -> bool {
        workload["spec"]["template"]["metadata"]["labels"][LABEL_REVISION].as_str()
            == Some(names::label_value(&revision.revision_id).as_str())
    }

    /// The revision's workload for a credential withdrawal (SPEC E6): a dedicated revision's
    /// Harness Deployment, or the Agent's gateway while it runs this (embedded) revision;
    /// `None` when it has none.
    pub(super) fn revision_workload(
        &self,
        revision: &RevisionSpec,
        path: &str,
        cancel: &CancelToken,
    ) -> Result<Option<Value>, ComputeError> {
        let workload = self
            .client
            .get(path, cancel)
            .map_err(|e| fail(e, "deployments"))?;
        Ok(workload
            .filter(|w| revision.harness_mode == HarnessMode::Dedicated || Self::runs(w, revision)))
    }

    /// Why an unready workload waits: the revision's Pods first, then, while `workload` has no
    /// Pod of its own (the Harness may have none while the gateway written beside it runs), its
    /// ReplicaSets' quota failures.
    pub(super) fn unready(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        workload: &Value,
        cancel: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        let pods = self.pods(namespace, &Self::revision_pods(revision), cancel)?;
        let mut findings = observe::pods(&pods);
        if findings.runtime_failure.is_none() {
            findings.runtime_failure = self.held_failure(namespace, &pods, cancel)?;
        }
        let mut reason = findings.pending_reason;
        if reason == Some("WORKLOAD_UNSCHEDULABLE")
            && revision.harness_mode == HarnessMode::Dedicated
            && !self.harness_claim_bound(revision, namespace, cancel)?
        {
            // SPEC WS5: the Harness claim not bound while its Pod cannot be scheduled.
            reason = Some("WORKSPACE_NODE_PENDING");
        }
        let component = &workload["spec"]["template"]["metadata"]["labels"][LABEL_COMPONENT];
        let own_pods = pods
            .iter()
            .any(|p| &p["metadata"]["labels"][LABEL_COMPONENT] == component);
        if reason.is_none() && !own_pods {
            let sets = self
                .client
                .list(
                    &format!("{APPS}/namespaces/{namespace}/replicasets"),
                    Some(&Self::revision_pods(revision)),
                    cancel,
                )
                .map_err(|e| fail(e, "replicasets"))?;
            if observe::quota_exceeded(&sets) {
                reason = Some("NAMESPACE_POD_QUOTA_EXCEEDED");
            }
        }
        // SPEC G11: a Pod that cannot start for want of a session's material Secret or key.
        let missing = revision
            .repository
            .as_ref()
            .map(|access| observe::missing_material(&pods, &access.materials))
            .unwrap_or_default();
        if !missing.is_empty() {
            reason = Some("REPOSITORY_GIT_MATERIAL_PENDING");
        }
        Ok(RevisionObservation {
            pending_reason: reason.map(str::to_string),
            runtime_failure: findings.runtime_failure,
            repository_credential_material_missing: missing,
            ..observation(revision, false)
        })
    }

    /// Whether the Agent's Harness claim is `Bound` (a missing claim is not).
    fn harness_claim_bound(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<bool, ComputeError> {
        let claim = self
            .client
            .get(
                &format!(
                    "{CORE}/namespaces/{namespace}/persistentvolumeclaims/{}",
                    manifests::harness_claim_name(&revision.agent_id)
                ),
                cancel,
            )
            .map_err(|e| fail(e, "persistentvolumeclaims"))?;
        Ok(claim.is_some_and(|c| c["status"]["phase"] == "Bound"))
    }

    /// The failure a harness holds behind its `/readyz` (SPEC R5): one running, unready Pod is
    /// asked through the API server's proxy. Anything but a 503 with a bounded code (a refusal
    /// without `pods/proxy`, a Pod the API server cannot reach, a timeout) is no finding and the
    /// observation stays pending as without the read; only a cancelled pass ends here.
    pub(super) fn held_failure(
        &self,
        namespace: &str,
        pods: &[Value],
        cancel: &CancelToken,
    ) -> Result<Option<crate::compute::RuntimeFailure>, ComputeError> {
        let Some(candidate) = observe::held_candidate(pods) else {
            return Ok(None);
        };
        let path = format!(
            "{CORE}/namespaces/{namespace}/pods/{}:{}/proxy/readyz",
            candidate.pod,
            manifests::HARNESS_PORT
        );
        let limit = observe::HELD_BODY_LIMIT;
        match self.client.get_raw(&path, limit, cancel) {
            Ok(reply) => {
                let code = observe::held_code(reply.status, &reply.body);
                if code.is_none() {
                    log::debug!(
                        "kubernetes harness readyz: status {}, no held code",
                        reply.status
                    );
                }
                Ok(code.map(|code| candidate.failure(code)))
            }
            Err(e) if e.is_cancelled() => Err(e.into_compute("KUBERNETES_BAD_REQUEST")),
            Err(e) => {
                log::debug!("{e}: no held code");
                Ok(None)
            }
        }
    }
}
