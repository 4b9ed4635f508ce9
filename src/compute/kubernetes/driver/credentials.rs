//! The built-in Credential Gateway, `kubernetes-secret-gateway` (SPEC §13, E6, E17): detaching
//! one credential source from a revision's workload and observing its Pods until none carries
//! it. The Secret is never read, written or deleted.

use super::*;

impl KubernetesDriver {
    /// Whether any runtime of the revision still carries the environment variable `env`: a
    /// Pod (terminating ones included), or a ReplicaSet that may still make Pods (replicas
    /// above zero, wanted or left) from a template carrying it.
    pub(super) fn runtime_carries(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        env: &str,
        cancel: &CancelToken,
    ) -> Result<bool, ComputeError> {
        self.runtime_carries_with(
            revision,
            namespace,
            |spec| manifests::carries_env(spec, env),
            cancel,
        )
    }

    /// `runtime_carries` for any pod spec `carries` says carries what is withdrawn.
    pub(super) fn runtime_carries_with(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        carries: impl Fn(&Value) -> bool,
        cancel: &CancelToken,
    ) -> Result<bool, ComputeError> {
        let labels = Self::revision_pods(revision);
        let pods = self.pods(namespace, &labels, cancel)?;
        if pods.iter().any(|p| carries(&p["spec"])) {
            return Ok(true);
        }
        let sets = self
            .client
            .list(
                &format!("{APPS}/namespaces/{namespace}/replicasets"),
                Some(&labels),
                cancel,
            )
            .map_err(|e| fail(e, "replicasets"))?;
        Ok(sets.iter().any(|rs| {
            let live = rs["spec"]["replicas"].as_i64().unwrap_or(1) > 0
                || rs["status"]["replicas"].as_i64().unwrap_or(0) > 0;
            live && carries(&rs["spec"]["template"]["spec"])
        }))
    }

    /// One read, decision and write of `withdraw_credential_source` (SPEC E6); `None` when
    /// the write met a concurrent change (409) or a delete (404), so the caller reads again.
    pub(super) fn detach_round(
        &self,
        revision: &RevisionSpec,
        source: &CredentialAttachment,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<Option<CredentialDetach>, ComputeError> {
        let env = source.env_name();
        let path = self.workload_path(revision, namespace);
        let Some(workload) = self.revision_workload(revision, &path, cancel)? else {
            return self
                .detach_answer(revision, namespace, &env, CredentialDetach::Absent, cancel)
                .map(Some);
        };
        if !owned(&workload, &revision.installation_id) {
            return Err(withdrawal_refused("CREDENTIAL_WITHDRAWAL_MISCONFIGURED"));
        }
        if !manifests::carries_env(&workload["spec"]["template"]["spec"], &env) {
            return self
                .detach_answer(revision, namespace, &env, CredentialDetach::Revoked, cancel)
                .map(Some);
        }
        // A running harness cannot drop its model key: it goes with its runtime.
        if source.harness
            && (workload["spec"]["replicas"].as_i64().unwrap_or(1) > 0
                || self.runtime_carries(revision, namespace, &env, cancel)?)
        {
            return Err(withdrawal_refused(
                "CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT",
            ));
        }
        let replacement = manifests::without_env(workload, &env);
        match self.client.replace(&path, &replacement, cancel) {
            Ok(_) => self
                .detach_answer(revision, namespace, &env, CredentialDetach::Revoked, cancel)
                .map(Some),
            Err(e) if matches!(e.kind(), KubeErrorKind::Conflict | KubeErrorKind::NotFound) => {
                Ok(None)
            }
            Err(e) => Err(fail(e, "deployments")),
        }
    }

    /// `Pending` while a runtime of the revision still carries `env`, else `revoked`.
    pub(super) fn detach_answer(
        &self,
        revision: &RevisionSpec,
        namespace: &str,
        env: &str,
        revoked: CredentialDetach,
        cancel: &CancelToken,
    ) -> Result<CredentialDetach, ComputeError> {
        if self.runtime_carries(revision, namespace, env, cancel)? {
            Ok(CredentialDetach::Pending)
        } else {
            Ok(revoked)
        }
    }
}

impl CredentialGateway for KubernetesDriver {
    /// Detaches one credential source from the revision's workload (SPEC E6, Kubernetes): no
    /// workload (a dedicated revision's Deployment; the gateway while it runs this revision)
    /// → `Absent`, or `Pending` while a Pod or live ReplicaSet of the revision still carries
    /// the source; a workload without this installation's labels → permanent
    /// `CREDENTIAL_WITHDRAWAL_MISCONFIGURED`; a workload that no longer carries it → the answer
    /// of its Pods (idempotent, so an E17 `recheck` never fails on an entry already gone); the
    /// harness source while its workload runs (replicas above zero, or a Pod still carrying
    /// it) → permanent `CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT`; otherwise the
    /// workload is written without the source's environment variable (a rollout when it runs)
    /// and the answer is `Pending` until no Pod or live ReplicaSet of the revision carries it,
    /// then `Revoked`. A 409 on the write is re-read and retried once, then retryable. The
    /// Secret is never read, written or deleted.
    fn withdraw_credential_source(
        &self,
        revision: &RevisionSpec,
        source: &CredentialAttachment,
        recheck: bool,
        cancel: &CancelToken,
    ) -> Result<CredentialDetach, ComputeError> {
        // E17's recheck is the same detach: a source already gone is answered, never refused.
        let _ = recheck;
        let Some(namespace) =
            self.runtime_namespace(&revision.installation_id, &revision.namespace_id, cancel)?
        else {
            return Ok(CredentialDetach::Absent);
        };
        for _ in 0..2 {
            if let Some(answer) = self.detach_round(revision, source, &namespace, cancel)? {
                return Ok(answer);
            }
        }
        Err(ComputeError::retryable("kubernetes_conflict", Some(409)).with_reason("Conflict"))
    }
}
