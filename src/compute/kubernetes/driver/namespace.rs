//! Namespace housekeeping (SPEC C3, N2, S1): emptying and releasing an adopted namespace, the
//! Sandbox Driver's RuntimeClass check and the Namespace observation. An adopted namespace is
//! never deleted.

use super::*;

impl KubernetesDriver {
    /// Deletes everything the driver created inside an adopted namespace; complete once no
    /// owned object or Pod is left.
    pub(super) fn empty_adopted(
        &self,
        spec: &NamespaceSpec,
        namespace: &str,
        cancel: &CancelToken,
    ) -> Result<bool, ComputeError> {
        let labels = selector(&[
            (
                LABEL_INSTALLATION,
                names::label_value(&spec.installation_id),
            ),
            (LABEL_NAMESPACE, names::label_value(&spec.namespace_id)),
        ]);
        let mut left = false;
        for (group, resource) in [
            (APPS, "deployments"),
            (CORE, "services"),
            (CORE, "serviceaccounts"),
            (CORE, "persistentvolumeclaims"),
            (NETWORKING, "networkpolicies"),
        ] {
            let collection = format!("{group}/namespaces/{namespace}/{resource}");
            let found = self
                .client
                .list(&collection, Some(&labels), cancel)
                .map_err(|e| fail(e, resource))?;
            for object in found.iter().filter(|o| owned(o, &spec.installation_id)) {
                left = true;
                self.client
                    .delete(
                        &format!("{collection}/{}", name_of(object)),
                        Some("Background"),
                        cancel,
                    )
                    .map_err(|e| fail(e, resource))?;
            }
        }
        Ok(!left && self.pods(namespace, &labels, cancel)?.is_empty())
    }

    /// Removes the labels adoption added (`manifests::adoption_labels`) from an adopted
    /// namespace that still carries them for this Namespace; the namespace's other labels and
    /// fields are left as they are. Nothing when they are gone or name another Namespace.
    pub(super) fn release_adopted(
        &self,
        spec: &NamespaceSpec,
        path: &str,
        current: &Value,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let ours = current["metadata"]["labels"][LABEL_NAMESPACE].as_str()
            == Some(names::label_value(&spec.namespace_id).as_str());
        if !ours || !owned(current, &spec.installation_id) || observe::terminating(current) {
            return Ok(());
        }
        let Value::Object(added) = manifests::adoption_labels(spec) else {
            return Ok(());
        };
        let removed: serde_json::Map<String, Value> =
            added.into_iter().map(|(k, _)| (k, Value::Null)).collect();
        let patch = json!({"metadata": {"labels": removed}});
        self.client
            .merge_patch(path, &patch, cancel)
            .map(drop)
            .map_err(|e| fail(e, "namespaces"))
    }

    /// The Sandbox Driver's RuntimeClass exists when `runtime-class` is one of its facets
    /// (SPEC S1): a missing one stops start-up (`SANDBOX_RUNTIME_CLASS_NOT_FOUND`).
    pub(super) fn check_runtime_class(&self, cancel: &CancelToken) -> Result<(), ComputeError> {
        let Some(name) = self
            .sandbox
            .as_ref()
            .and_then(|s| s.runtime_class_name.as_deref())
        else {
            return Ok(());
        };
        let found = self
            .client
            .get(&format!("{NODE}/runtimeclasses/{name}"), cancel)
            .map_err(|e| fail(e, "runtimeclasses"))?;
        match found {
            Some(_) => Ok(()),
            None => Err(ComputeError::permanent(
                "SANDBOX_RUNTIME_CLASS_NOT_FOUND",
                "kubernetes",
                Some(404),
            )),
        }
    }

    pub(super) fn namespace_observation(
        spec: &NamespaceSpec,
        pending: Option<&str>,
    ) -> NamespaceObservation {
        NamespaceObservation {
            namespace_id: spec.namespace_id.clone(),
            complete: pending.is_none(),
            failure: None,
            pending_reason: pending.map(str::to_string),
            reason: None,
        }
    }
}
