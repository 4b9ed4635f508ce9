//! The one scripted Compute Driver of the integration tests (kube-rs' scripted fake API
//! server, in spirit), and the harness that drives a real `runtime::Worker` with it until the
//! queue is quiet.
//!
//! Like the real drivers it honours the pass's cancellation token: a cancelled call sends
//! nothing (it is not recorded) and a scripted latency is cut short. Every call is recorded as
//! (method, target id), so tests assert the exact conversation, including "radio silence" (no
//! call at all). Namespace methods answer from per-method `Script`s of closures over the
//! request; revision and Agent methods answer from per-target scripts (default: success,
//! ready); a hook runs inside each call so a test can change the database mid-effect (races).

#![allow(dead_code)] // Shared by test modules that each use a subset.

use crate::support::{context_with, poll, TestDb};
use occ_worker::cancel::CancelToken;
use occ_worker::compute::*;
use occ_worker::events::Events;
use occ_worker::queue::QueueOptions;
use occ_worker::reconcile::registry;
use occ_worker::runtime::{RuntimeOptions, Worker};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        reason: None,
    }
}

/// One scripted answer of `prepare_revision`.
#[derive(Clone, Debug)]
pub enum Prepare {
    Ready,
    ReadyWithWarning(&'static str, &'static str),
    Pending(&'static str),
    RuntimeFailure(&'static str),
    /// An observation naming another revision.
    Mismatched,
    /// Unready, every session material it was handed missing (SPEC G11).
    MaterialMissing,
    /// Unready, listing a session it was never handed (SPEC G11: invalid).
    MaterialMissingUnknown,
    Fail(ComputeError),
}

/// The Credential Gateway id every scripted worker runs with (SPEC §13): sources owned by it
/// resolve; any other owner id is another installation's.
pub const GATEWAY: &str = "gateway-1";

pub type Hook = Box<dyn Fn(&str, &str) + Send + Sync>;

/// The driver. Defaults: id `scripted`, Namespaces complete at once, revisions ready, every
/// other effect succeeds.
pub struct ScriptedDriver {
    pub id: String,
    pub calls: Mutex<Vec<(String, String)>>,
    pub ensure_namespace: Script<NamespaceSpec, NamespaceObservation>,
    pub delete_namespace: Script<NamespaceSpec, NamespaceObservation>,
    pub prepare: Mutex<HashMap<String, VecDeque<Prepare>>>,
    /// (method, target) → scripted failures, consumed in order; empty means success.
    pub failures: Mutex<HashMap<(String, String), VecDeque<ComputeError>>>,
    pub hook: Mutex<Option<Hook>>,
    pub exclusive: bool,
    pub maintenance: Option<Duration>,
    /// Whether it runs workspace setups (SPEC WS2): `false`, the contract's default.
    pub workspace_setup: bool,
    pub latency: Duration,
    pub inflight: Mutex<HashMap<String, usize>>,
    /// Calls that ran while another call for the same Agent was in flight (lane violations).
    pub overlaps: std::sync::atomic::AtomicUsize,
    /// A database that records every call and overlapping calls per Agent in
    /// `public.occ_driver_calls` / `public.occ_driver_overlaps`, so lane exclusion is checked
    /// across worker processes (see `LaneRecorder`).
    pub lane_db: Option<String>,
    /// What the driver says it does with runtime credentials (SPEC Z11).
    pub credentials: RuntimeCredentials,
    /// The spec of every `prepare_revision` call, in order: what the driver was given.
    pub prepared: Mutex<Vec<RevisionSpec>>,
    /// The execution admissions the driver runs (SPEC Z1); `None`: the worker's own check.
    pub admissions: Mutex<Option<Vec<ExecutionAdmission>>>,
    /// Whether the driver offers a rejected-execution withdrawal (SPEC Z1), recorded as
    /// `withdraw_rejected_execution` and failing as scripted by `fail`.
    pub withdrawal: bool,
    /// Whether the driver has `withdraw_credential_source` (SPEC E5); off, it answers
    /// `CREDENTIAL_WITHDRAWAL_UNSUPPORTED` as Docker does.
    pub credential_withdrawal: bool,
    /// `revision/source` → scripted detach answers, consumed in order; empty means `Revoked`.
    /// Each call is recorded as `withdraw_credential_source:<revision>/<source>` (with
    /// `/recheck` for SPEC E17's re-detach) and fails as scripted by `fail` on that target.
    pub detach: Mutex<HashMap<String, VecDeque<CredentialDetach>>>,
    /// Whether it delivers repository credentials (SPEC G10): the revision must pin the
    /// selected Sandbox Driver (none pinned and none selected counts), its runtime namespace
    /// `occ-<namespace>`, recorded as `runtime_namespace`.
    pub repository: bool,
    /// Answers of `retire_expired_repository_access` (SPEC G14), consumed in order; empty
    /// means `Withdrawn`.
    pub expiry: Mutex<VecDeque<RepositoryWithdrawal>>,
    /// What `verify_repository_execution` answers (SPEC G15): `["pod-<revision>"]` unless set.
    pub execution: Mutex<Option<serde_json::Value>>,
    /// What `observe_revision` answers (SPEC G15): `Running` unless set.
    pub harness_state: Mutex<Option<HarnessState>>,
    /// Whether `observe_revision` blocks until its token is cancelled (SPEC G15's bound).
    pub observe_blocks: std::sync::atomic::AtomicBool,
}

/// The cross-process lane recorder: one connection per worker thread.
pub struct LaneRecorder;

impl LaneRecorder {
    /// Creates the recorder tables in the database at `url` (idempotent).
    pub fn setup(url: &str) {
        let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect");
        c.batch_execute(
            "CREATE TABLE IF NOT EXISTS public.occ_driver_inflight (agent text PRIMARY KEY, n integer NOT NULL);
             CREATE TABLE IF NOT EXISTS public.occ_driver_calls (pid integer NOT NULL, agent text NOT NULL, method text NOT NULL);
             CREATE TABLE IF NOT EXISTS public.occ_driver_overlaps (pid integer NOT NULL, agent text NOT NULL, method text NOT NULL);",
        )
        .expect("lane recorder tables");
    }

    fn with<T>(url: &str, f: impl FnOnce(&mut postgres::Client) -> T) -> T {
        thread_local! {
            static CLIENT: std::cell::RefCell<Option<postgres::Client>> = const { std::cell::RefCell::new(None) };
        }
        CLIENT.with(|cell| {
            let mut slot = cell.borrow_mut();
            let client = slot.get_or_insert_with(|| {
                postgres::Client::connect(url, postgres::NoTls).expect("lane recorder connect")
            });
            f(client)
        })
    }

    /// Enters the Agent's lane: records the call, and an overlap if another call is in flight.
    fn enter(url: &str, agent: &str, method: &str) {
        let pid = std::process::id() as i32;
        LaneRecorder::with(url, |c| {
            let n: i32 = crate::support::one(
                c,
                "WITH call AS (INSERT INTO public.occ_driver_calls (pid, agent, method) VALUES ($1, $2, $3))
                     INSERT INTO public.occ_driver_inflight AS i (agent, n) VALUES ($2, 1)
                     ON CONFLICT (agent) DO UPDATE SET n = i.n + 1 RETURNING n",
                &[&pid, &agent, &method],
            );
            if n > 1 {
                c.execute(
                    "INSERT INTO public.occ_driver_overlaps (pid, agent, method) VALUES ($1, $2, $3)",
                    &[&pid, &agent, &method],
                )
                .expect("lane overlap");
            }
        })
    }

    fn leave(url: &str, agent: &str) {
        LaneRecorder::with(url, |c| {
            c.execute(
                "UPDATE public.occ_driver_inflight SET n = n - 1 WHERE agent = $1",
                &[&agent],
            )
            .expect("lane leave");
        })
    }
}

impl Default for ScriptedDriver {
    fn default() -> ScriptedDriver {
        ScriptedDriver {
            id: "scripted".into(),
            calls: Mutex::default(),
            ensure_namespace: Script::new(|s| Ok(ns_observation(s, true, None, None))),
            delete_namespace: Script::new(|s| Ok(ns_observation(s, true, None, None))),
            prepare: Mutex::default(),
            failures: Mutex::default(),
            hook: Mutex::default(),
            exclusive: false,
            maintenance: None,
            workspace_setup: false,
            latency: Duration::ZERO,
            inflight: Mutex::default(),
            overlaps: Default::default(),
            lane_db: None,
            credentials: RuntimeCredentials::None,
            prepared: Mutex::default(),
            admissions: Mutex::default(),
            withdrawal: false,
            credential_withdrawal: true,
            detach: Mutex::default(),
            repository: false,
            expiry: Mutex::default(),
            execution: Mutex::default(),
            harness_state: Mutex::default(),
            observe_blocks: Default::default(),
        }
    }
}

impl ScriptedDriver {
    pub fn new() -> ScriptedDriver {
        ScriptedDriver::default()
    }

    /// A driver with its own id (revisions pinned to another Compute are refused).
    pub fn named(id: &str) -> ScriptedDriver {
        ScriptedDriver {
            id: id.into(),
            ..ScriptedDriver::default()
        }
    }

    /// Every call so far as `method:target`.
    pub fn log(&self) -> Vec<String> {
        self.calls
            .lock()
            .iter()
            .map(|(m, t)| format!("{m}:{t}"))
            .collect()
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        self.calls.lock().clear();
    }

    pub fn script_prepare(&self, revision: &str, steps: Vec<Prepare>) {
        self.prepare
            .lock()
            .entry(revision.into())
            .or_default()
            .extend(steps);
    }

    pub fn fail(&self, method: &str, target: &str, error: ComputeError) {
        self.failures
            .lock()
            .entry((method.into(), target.into()))
            .or_default()
            .push_back(error);
    }

    /// The next answers of `withdraw_credential_source` for `revision`'s `source`.
    pub fn script_detach(&self, revision: &str, source: &str, answers: Vec<CredentialDetach>) {
        self.detach
            .lock()
            .entry(format!("{revision}/{source}"))
            .or_default()
            .extend(answers);
    }

    /// Runs only these execution admissions from now on (SPEC Z1).
    pub fn run_admissions(&self, admissions: Vec<ExecutionAdmission>) {
        *self.admissions.lock() = Some(admissions);
    }

    pub fn on_call(&self, hook: impl Fn(&str, &str) + Send + Sync + 'static) {
        *self.hook.lock() = Some(Box::new(hook));
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<(String, String)> {
        self.calls.lock().clone()
    }

    /// The calls of one method, by target.
    pub fn calls_of(&self, method: &str) -> Vec<String> {
        self.calls
            .lock()
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, t)| t.clone())
            .collect()
    }

    fn record_for(
        &self,
        agent: &str,
        method: &str,
        target: &str,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        // A cancelled pass sends nothing (the real drivers check before each request).
        cancel.check()?;
        {
            let mut inflight = self.inflight.lock();
            let n = inflight.entry(agent.to_string()).or_default();
            if *n > 0 {
                self.overlaps
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            *n += 1;
        }
        if let Some(url) = &self.lane_db {
            LaneRecorder::enter(url, agent, method);
        }
        let out = self.record(method, target, cancel);
        if let Some(url) = &self.lane_db {
            LaneRecorder::leave(url, agent);
        }
        *self.inflight.lock().entry(agent.to_string()).or_default() -= 1;
        out
    }

    fn record(&self, method: &str, target: &str, cancel: &CancelToken) -> Result<(), ComputeError> {
        cancel.check()?;
        self.calls.lock().push((method.into(), target.into()));
        if !self.latency.is_zero() {
            cancel.sleep(self.latency)?;
        }
        if let Some(hook) = &*self.hook.lock() {
            hook(method, target);
        }
        match self
            .failures
            .lock()
            .get_mut(&(method.to_string(), target.to_string()))
            .and_then(|q| q.pop_front())
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl ComputeDriver for ScriptedDriver {
    fn id(&self) -> &str {
        &self.id
    }

    fn implementation(&self) -> &str {
        "scripted"
    }

    fn preflight(&self, cancel: &CancelToken) -> Result<Vec<PreflightWarning>, ComputeError> {
        self.record("preflight", "", cancel)?;
        Ok(vec![])
    }

    fn ensure_namespace(
        &self,
        namespace: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        self.record("ensure_namespace", &namespace.namespace_id, cancel)?;
        self.ensure_namespace.answer(namespace, cancel)
    }

    fn delete_namespace(
        &self,
        namespace: &NamespaceSpec,
        cancel: &CancelToken,
    ) -> Result<NamespaceObservation, ComputeError> {
        self.record("delete_namespace", &namespace.namespace_id, cancel)?;
        self.delete_namespace.answer(namespace, cancel)
    }

    fn prepare_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<RevisionObservation, ComputeError> {
        self.record_for(
            &revision.agent_id,
            "prepare_revision",
            &revision.revision_id,
            cancel,
        )?;
        self.prepared.lock().push(revision.clone());
        let step = self
            .prepare
            .lock()
            .get_mut(&revision.revision_id)
            .and_then(|q| q.pop_front())
            .unwrap_or(Prepare::Ready);
        let mut o = RevisionObservation {
            namespace_id: revision.namespace_id.clone(),
            agent_id: revision.agent_id.clone(),
            revision_id: revision.revision_id.clone(),
            ready: true,
            pending_reason: None,
            runtime_failure: None,
            warnings: vec![],
            repository_credential_material_missing: vec![],
        };
        match step {
            Prepare::Ready => {}
            Prepare::ReadyWithWarning(code, plugin) => o.warnings.push(PluginWarning {
                code: code.into(),
                plugin_id: plugin.into(),
            }),
            Prepare::Pending(code) => {
                o.ready = false;
                o.pending_reason = Some(code.into());
            }
            Prepare::RuntimeFailure(code) => {
                o.ready = false;
                o.runtime_failure = Some(RuntimeFailure::new(code));
            }
            Prepare::Mismatched => o.revision_id = "someone-else".into(),
            Prepare::MaterialMissing => {
                o.ready = false;
                o.pending_reason = Some("REPOSITORY_GIT_MATERIAL_PENDING".into());
                o.repository_credential_material_missing = revision
                    .repository
                    .iter()
                    .flat_map(|a| &a.materials)
                    .map(|m| MissingMaterial {
                        repository_ref: m.repository_ref.clone(),
                        session_id: m.session_id.clone(),
                    })
                    .collect();
            }
            Prepare::MaterialMissingUnknown => {
                o.ready = false;
                o.repository_credential_material_missing = vec![MissingMaterial {
                    repository_ref: "github.com/acme/other".into(),
                    session_id: "s-unknown".into(),
                }];
            }
            Prepare::Fail(e) => return Err(e),
        }
        Ok(o)
    }

    fn deactivate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let (agent, target) = (&revision.agent_id, &revision.revision_id);
        self.record_for(agent, "deactivate_revision", target, cancel)
    }

    fn bind_agent(&self, agent: &AgentSpec, cancel: &CancelToken) -> Result<(), ComputeError> {
        self.record_for(&agent.agent_id, "bind_agent", &agent.agent_id, cancel)
    }

    fn activate_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let (agent, target) = (&revision.agent_id, &revision.revision_id);
        self.record_for(agent, "activate_revision", target, cancel)
    }

    fn stop_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let (agent, target) = (&revision.agent_id, &revision.revision_id);
        self.record_for(agent, "stop_revision", target, cancel)
    }

    fn retire_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let (agent, target) = (&revision.agent_id, &revision.revision_id);
        self.record_for(agent, "retire_revision", target, cancel)
    }

    fn delete_agent_runtime_credentials(
        &self,
        agent: &AgentSpec,
        cancel: &CancelToken,
    ) -> Result<(), ComputeError> {
        let id = &agent.agent_id;
        self.record_for(id, "delete_agent_runtime_credentials", id, cancel)
    }

    fn policy(&self) -> &dyn DriverPolicy {
        self
    }

    /// Off (`credential_withdrawal`), no gateway: the worker answers
    /// `CREDENTIAL_WITHDRAWAL_UNSUPPORTED` as it does for Docker.
    fn credential_gateway(&self) -> Option<&dyn CredentialGateway> {
        self.credential_withdrawal
            .then_some(self as &dyn CredentialGateway)
    }

    fn repository(&self) -> Option<&dyn RepositoryRuntime> {
        self.repository.then_some(self as &dyn RepositoryRuntime)
    }
}

impl RepositoryRuntime for ScriptedDriver {
    fn runtime_namespace(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<String, ComputeError> {
        let (agent, target) = (&revision.agent_id, &revision.revision_id);
        self.record_for(agent, "runtime_namespace", target, cancel)?;
        Ok(format!("occ-{}", revision.namespace_id))
    }

    fn retire_expired_repository_access(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<RepositoryWithdrawal, ComputeError> {
        let (agent, target) = (&revision.agent_id, &revision.revision_id);
        self.record_for(agent, "retire_expired_repository_access", target, cancel)?;
        Ok(self
            .expiry
            .lock()
            .pop_front()
            .unwrap_or(RepositoryWithdrawal::Withdrawn))
    }

    fn observe_revision(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<HarnessState, ComputeError> {
        let (agent, target) = (&revision.agent_id, &revision.revision_id);
        self.record_for(agent, "observe_revision", target, cancel)?;
        if self
            .observe_blocks
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            // A Harness that never answers: only the token ends the call.
            loop {
                cancel.sleep(Duration::from_secs(60))?;
            }
        }
        Ok(self.harness_state.lock().unwrap_or(HarnessState::Running))
    }

    fn verify_repository_execution(
        &self,
        revision: &RevisionSpec,
        cancel: &CancelToken,
    ) -> Result<serde_json::Value, ComputeError> {
        let (agent, target) = (&revision.agent_id, &revision.revision_id);
        self.record_for(agent, "verify_repository_execution", target, cancel)?;
        Ok(self
            .execution
            .lock()
            .clone()
            .unwrap_or_else(|| serde_json::json!([format!("pod-{target}")])))
    }
}

impl DriverPolicy for ScriptedDriver {
    fn requires_stopped_predecessors(&self, _revision: &RevisionSpec) -> bool {
        self.exclusive
    }

    fn runtime_credentials(&self) -> RuntimeCredentials {
        self.credentials
    }

    fn maintenance_interval(&self) -> Option<Duration> {
        self.maintenance
    }

    fn supports_workspace_setup(&self, _revision: &RevisionSpec) -> bool {
        self.workspace_setup
    }

    fn validate_repository_credentials(
        &self,
        revision: &RevisionSpec,
        sandbox_driver_id: Option<&str>,
    ) -> Option<Result<(), ComputeError>> {
        self.repository.then(|| {
            if revision.sandbox_driver_id.as_deref() == sandbox_driver_id {
                Ok(())
            } else {
                Err(ComputeError::permanent(
                    REPOSITORY_RECIPIENT_UNVERIFIED,
                    "scripted",
                    None,
                ))
            }
        })
    }

    fn validate_execution_admission(
        &self,
        revision: &RevisionSpec,
        purpose: AdmissionUse,
    ) -> Result<(), ComputeError> {
        match &*self.admissions.lock() {
            None => check_execution_admission(revision),
            Some(runs) if runs.contains(&revision.execution_admission) => {
                assert_eq!(purpose, AdmissionUse::Stored);
                Ok(())
            }
            Some(_) => Err(execution_admission_unavailable()),
        }
    }

    fn rejected_execution_withdrawal<'a>(
        &'a self,
        revision: &'a RevisionSpec,
    ) -> Option<Withdrawal<'a>> {
        self.withdrawal.then(|| -> Withdrawal<'a> {
            Box::new(move |cancel| {
                let (agent, target) = (&revision.agent_id, &revision.revision_id);
                self.record_for(agent, "withdraw_rejected_execution", target, cancel)
            })
        })
    }
}

impl CredentialGateway for ScriptedDriver {
    fn withdraw_credential_source(
        &self,
        revision: &RevisionSpec,
        source: &CredentialAttachment,
        recheck: bool,
        cancel: &CancelToken,
    ) -> Result<CredentialDetach, ComputeError> {
        let key = format!("{}/{}", revision.revision_id, source.source_id);
        let target = if recheck {
            format!("{key}/recheck")
        } else {
            key.clone()
        };
        self.record_for(
            &revision.agent_id,
            "withdraw_credential_source",
            &target,
            cancel,
        )?;
        Ok(self
            .detach
            .lock()
            .get_mut(&key)
            .and_then(|q| q.pop_front())
            .unwrap_or(CredentialDetach::Revoked))
    }
}

/// Runs a real worker with `driver` (the scripted one, or any other `ComputeDriver`, e.g. the
/// Kubernetes driver against the fake API server) until `done` holds (checked by bounded DB
/// polling), then stops it through its `StopHandle`. Panics if `done` never holds within
/// `timeout`. The worker runs the Namespace, Agent and revision reconcilers.
pub fn run_until(
    db: &TestDb,
    driver: Arc<dyn ComputeDriver>,
    done: impl Fn(&mut postgres::Client) -> bool,
) {
    run_with(db, driver, Opts::default(), done)
}

/// Worker settings for one run.
#[derive(Clone, Copy)]
pub struct Opts {
    pub concurrency: usize,
    pub timeout: Duration,
    pub lease: Duration,
    pub convergence: Duration,
    /// Independent workers, each with its own pool (as separate processes would be).
    pub workers: usize,
    /// The Installation's Credential Gateway id (SPEC §13), when one is selected.
    pub credential_gateway: Option<&'static str>,
    /// The worker's mode (SPEC N14: production alone deactivates before the first pointer).
    pub mode: occ_worker::config::Mode,
    /// The Installation's repository sender (SPEC G6), when one is selected (leaked, so the
    /// options stay `Copy`: see `leak_sender`).
    pub repository_sender: Option<&'static Arc<occ_worker::repository::RepositorySender>>,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            concurrency: 4,
            timeout: Duration::from_secs(30),
            lease: Duration::from_secs(5),
            convergence: Duration::from_secs(60),
            workers: 1,
            credential_gateway: Some(GATEWAY),
            mode: occ_worker::config::Mode::Development,
            repository_sender: None,
        }
    }
}

/// A sender for `Opts::repository_sender`: one per test, kept for the test process's life.
pub fn leak_sender(
    sender: occ_worker::repository::RepositorySender,
) -> &'static Arc<occ_worker::repository::RepositorySender> {
    Box::leak(Box::new(Arc::new(sender)))
}

pub fn run_with(
    db: &TestDb,
    driver: Arc<dyn ComputeDriver>,
    opts: Opts,
    done: impl Fn(&mut postgres::Client) -> bool,
) {
    run_on(&db.url, driver, opts, done)
}

/// `run_with`, capturing the worker's event lines.
pub fn run_captured(
    db: &TestDb,
    driver: Arc<dyn ComputeDriver>,
    opts: Opts,
    done: impl Fn(&mut postgres::Client) -> bool,
) -> crate::support::Captured {
    let captured = crate::support::Captured::default();
    let ok = run_events(&db.url, driver, opts, done, || {
        Events::to(Box::new(captured.clone()))
    });
    assert_reached(ok, opts.timeout);
    captured
}

/// `run_with` on the database at `url` (a child worker process has no `TestDb` of its own).
pub fn run_on(
    url: &str,
    driver: Arc<dyn ComputeDriver>,
    opts: Opts,
    done: impl Fn(&mut postgres::Client) -> bool,
) {
    let ok = run_events(url, driver, opts, done, crate::support::logged_events);
    assert_reached(ok, opts.timeout);
}

fn run_events(
    url: &str,
    driver: Arc<dyn ComputeDriver>,
    opts: Opts,
    done: impl Fn(&mut postgres::Client) -> bool,
    events: impl Fn() -> Events,
) -> bool {
    let Opts {
        concurrency,
        timeout,
        lease,
        convergence,
        workers,
        credential_gateway,
        mode,
        repository_sender,
    } = opts;
    let mut running = Vec::new();
    for _ in 0..workers {
        let mut queue = QueueOptions::new(lease, 5);
        queue.retry_base = Duration::from_millis(50);
        let pool = occ_worker::db::pool(
            url,
            Duration::from_secs(10),
            occ_worker::runtime::budget::ConnectionBudget::new(concurrency).pool_size(),
        )
        .expect("worker pool");
        let ctx = context_with(pool, driver.clone())
            .queue(queue)
            .convergence(convergence)
            .events(events())
            .credential_gateway(credential_gateway.map(String::from))
            .mode(mode)
            .repository_sender(repository_sender.cloned())
            .build();
        let worker = Worker::new(
            ctx,
            registry::production(),
            RuntimeOptions {
                concurrency,
                poll_interval: Duration::from_millis(25),
                shutdown_grace: Duration::from_secs(5),
                listen_url: Some(url.to_string()),
                db_timeout: Duration::from_secs(10),
            },
        );
        let stop = worker.stop_handle();
        running.push((stop, std::thread::spawn(move || worker.run())));
    }
    let mut client = postgres::Client::connect(url, postgres::NoTls).expect("connect");
    let ok = poll(timeout, Duration::from_millis(20), || {
        done(&mut client).then_some(())
    })
    .is_some();
    for (stop, _) in &running {
        stop.stop();
    }
    for (_, handle) in running {
        handle.join().expect("worker thread").expect("worker run");
    }
    ok
}

/// Runs a worker for `time`, whatever happens (to show that nothing more happens).
pub fn run_for(db: &TestDb, driver: Arc<dyn ComputeDriver>, time: Duration) {
    let opts = Opts {
        timeout: time,
        ..Opts::default()
    };
    run_events(
        &db.url,
        driver,
        opts,
        |_| false,
        crate::support::logged_events,
    );
}

fn assert_reached(ok: bool, timeout: Duration) {
    assert!(
        ok,
        "the queue did not reach the expected state within {timeout:?}"
    );
}

/// Whether no work is queued or claimed.
pub fn quiet(client: &mut postgres::Client) -> bool {
    let n: i64 = crate::support::one(
        client,
        "SELECT count(*) FROM occ.work_status WHERE state IN ('queued', 'claimed')",
        &[],
    );
    n == 0
}

/// The scripted driver honours cancellation like the real ones (STYLE 12): a cancelled pass
/// sends nothing, and a lease that lapses cuts a scripted latency short.
#[test]
fn the_scripted_driver_sends_nothing_once_cancelled_and_cuts_latency_short() {
    use occ_worker::cancel::LossCause;
    let driver = ScriptedDriver {
        latency: Duration::from_secs(30),
        ..ScriptedDriver::default()
    };
    let agent = AgentSpec {
        installation_id: "inst".into(),
        namespace_id: "ns1".into(),
        agent_id: "a".into(),
        service_principal_id: "p".into(),
    };
    let cancelled = CancelToken::unbounded();
    cancelled.cancel(LossCause::RenewalRefused);
    let e = driver.bind_agent(&agent, &cancelled).unwrap_err();
    assert!(matches!(e.kind(), ComputeErrorKind::Cancelled(_)), "{e}");
    assert!(driver.calls().is_empty(), "a cancelled call is never sent");

    let lapsing = CancelToken::new(Instant::now() + Duration::from_millis(100));
    let started = Instant::now();
    let e = driver.bind_agent(&agent, &lapsing).unwrap_err();
    assert!(matches!(e.kind(), ComputeErrorKind::Cancelled(_)), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(driver.calls_of("bind_agent"), vec!["a".to_string()]);
}
