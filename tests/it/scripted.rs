//! A scripted Compute Driver for integration tests (kube-rs' scripted fake API server, in
//! spirit): every method answers from its own queue of scripted steps, falls back to a
//! default answer when its script is empty, and records every call (`method:ids`) so tests
//! assert the exact conversation, including "radio silence" (no call at all).
//!
//! Steps are closures over the request, so an answer can name the exact Namespace or revision
//! asked about; each step may carry a latency that honours the pass's cancellation token.

#![allow(dead_code)] // Shared by test modules that each use a subset.

use occ_worker::cancel::CancelToken;
use occ_worker::compute::{
    AgentSpec, ComputeDriver, ComputeError, FailureClass, NamespaceObservation, NamespaceSpec,
    PreflightWarning, RevisionObservation, RevisionSpec,
};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::time::Duration;

type Answer<A, T> = Box<dyn FnOnce(&A) -> Result<T, ComputeError> + Send>;
type DefaultAnswer<A, T> = Box<dyn Fn(&A) -> Result<T, ComputeError> + Send + Sync>;

struct Step<A, T> {
    latency: Duration,
    answer: Answer<A, T>,
}

/// The script of one driver method: queued steps, then the default answer.
pub struct Script<A, T> {
    steps: Mutex<VecDeque<Step<A, T>>>,
    default: Mutex<DefaultAnswer<A, T>>,
}

impl<A, T> Script<A, T> {
    fn new(default: impl Fn(&A) -> Result<T, ComputeError> + Send + Sync + 'static) -> Self {
        Script {
            steps: Mutex::new(VecDeque::new()),
            default: Mutex::new(Box::new(default)),
        }
    }

    /// Queues one answer.
    pub fn then(&self, answer: impl FnOnce(&A) -> Result<T, ComputeError> + Send + 'static) {
        self.then_after(Duration::ZERO, answer);
    }

    /// Queues one answer given after `latency` (cancellable).
    pub fn then_after(
        &self,
        latency: Duration,
        answer: impl FnOnce(&A) -> Result<T, ComputeError> + Send + 'static,
    ) {
        self.steps.lock().push_back(Step {
            latency,
            answer: Box::new(answer),
        });
    }

    /// Queues the same error `n` times.
    pub fn then_err(&self, n: usize, error: ComputeError) {
        for _ in 0..n {
            let e = error.clone();
            self.then(move |_| Err(e));
        }
    }

    /// Replaces the answer given once the script is empty.
    pub fn default_to(
        &self,
        answer: impl Fn(&A) -> Result<T, ComputeError> + Send + Sync + 'static,
    ) {
        *self.default.lock() = Box::new(answer);
    }

    /// Steps not yet consumed.
    pub fn remaining(&self) -> usize {
        self.steps.lock().len()
    }

    fn answer(&self, request: &A, cancel: &CancelToken) -> Result<T, ComputeError> {
        cancel.check()?;
        let step = self.steps.lock().pop_front();
        match step {
            Some(step) => {
                if !step.latency.is_zero() {
                    cancel.sleep(step.latency)?;
                }
                (step.answer)(request)
            }
            None => (self.default.lock())(request),
        }
    }
}

/// A Namespace observation for the Namespace asked about.
pub fn ns_observation(
    spec: &NamespaceSpec,
    complete: bool,
    failure: Option<FailureClass>,
    pending_reason: Option<&str>,
) -> NamespaceObservation {
    NamespaceObservation {
        namespace_id: spec.namespace_id.clone(),
        complete,
        failure,
        pending_reason: pending_reason.map(str::to_string),
    }
}

/// The driver. Defaults: preflight clean, Namespaces complete at once, revisions ready, every
/// other effect succeeds.
pub struct ScriptedDriver {
    id: String,
    calls: Mutex<Vec<String>>,
    pub preflight: Script<(), Vec<PreflightWarning>>,
    pub ensure_namespace: Script<NamespaceSpec, NamespaceObservation>,
    pub delete_namespace: Script<NamespaceSpec, NamespaceObservation>,
    pub prepare_revision: Script<RevisionSpec, RevisionObservation>,
    pub deactivate_revision: Script<RevisionSpec, ()>,
    pub bind_agent: Script<AgentSpec, ()>,
    pub activate_revision: Script<RevisionSpec, ()>,
    pub stop_revision: Script<RevisionSpec, ()>,
    pub retire_revision: Script<RevisionSpec, ()>,
    pub delete_agent_runtime_credentials: Script<AgentSpec, ()>,
    pub stopped_predecessors: Mutex<bool>,
    pub maintenance: Mutex<Option<Duration>>,
}

impl ScriptedDriver {
    pub fn new(id: &str) -> ScriptedDriver {
        ScriptedDriver {
            id: id.into(),
            calls: Mutex::new(Vec::new()),
            preflight: Script::new(|_| Ok(Vec::new())),
            ensure_namespace: Script::new(|s| Ok(ns_observation(s, true, None, None))),
            delete_namespace: Script::new(|s| Ok(ns_observation(s, true, None, None))),
            prepare_revision: Script::new(|r: &RevisionSpec| {
                Ok(RevisionObservation {
                    namespace_id: r.namespace_id.clone(),
                    agent_id: r.agent_id.clone(),
                    revision_id: r.revision_id.clone(),
                    ready: true,
                    pending_reason: None,
                    runtime_failure: None,
                    warnings: Vec::new(),
                })
            }),
            deactivate_revision: Script::new(|_| Ok(())),
            bind_agent: Script::new(|_| Ok(())),
            activate_revision: Script::new(|_| Ok(())),
            stop_revision: Script::new(|_| Ok(())),
            retire_revision: Script::new(|_| Ok(())),
            delete_agent_runtime_credentials: Script::new(|_| Ok(())),
            stopped_predecessors: Mutex::new(false),
            maintenance: Mutex::new(None),
        }
    }

    /// Every call so far, in order, as `method:ids`.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().clone()
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        self.calls.lock().clear();
    }

    fn record(&self, call: String) {
        self.calls.lock().push(call);
    }
}

fn revision_call(method: &str, r: &RevisionSpec) -> String {
    format!(
        "{method}:{}/{}/{}",
        r.namespace_id, r.agent_id, r.revision_id
    )
}

impl ComputeDriver for ScriptedDriver {
    fn id(&self) -> &str {
        &self.id
    }

    fn implementation(&self) -> &str {
        "scripted"
    }

    fn preflight(&self, cancel: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        self.record("preflight".into());
        self.preflight.answer(&(), cancel)
    }

    fn ensure_namespace(
        &self,
        namespace: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        self.record(format!("ensure_namespace:{}", namespace.namespace_id));
        self.ensure_namespace.answer(namespace, cancel)
    }

    fn delete_namespace(
        &self,
        namespace: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        self.record(format!("delete_namespace:{}", namespace.namespace_id));
        self.delete_namespace.answer(namespace, cancel)
    }

    fn prepare_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        self.record(revision_call("prepare_revision", revision));
        self.prepare_revision.answer(revision, cancel)
    }

    fn deactivate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.record(revision_call("deactivate_revision", revision));
        self.deactivate_revision.answer(revision, cancel)
    }

    fn bind_agent(&self, agent: &AgentSpec, cancel: &CancelToken) -> Result<(), ComputeError> {
        self.record(format!(
            "bind_agent:{}/{}",
            agent.namespace_id, agent.agent_id
        ));
        self.bind_agent.answer(agent, cancel)
    }

    fn activate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.record(revision_call("activate_revision", revision));
        self.activate_revision.answer(revision, cancel)
    }

    fn stop_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.record(revision_call("stop_revision", revision));
        self.stop_revision.answer(revision, cancel)
    }

    fn retire_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.record(revision_call("retire_revision", revision));
        self.retire_revision.answer(revision, cancel)
    }

    fn delete_agent_runtime_credentials(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        self.record(format!(
            "delete_agent_runtime_credentials:{}/{}",
            agent.namespace_id, agent.agent_id
        ));
        self.delete_agent_runtime_credentials.answer(agent, cancel)
    }

    fn requires_stopped_predecessors(&self, _revision: &RevisionSpec) -> bool {
        *self.stopped_predecessors.lock()
    }

    fn maintenance_interval(&self) -> Option<Duration> {
        *self.maintenance.lock()
    }
}
