//! What a pass says happened: its `Outcome`, the `Report` the policy reads, and the `Facts`
//! only its own reconciler's publication reads. Plain data: nothing here touches the database
//! or infrastructure.

use crate::compute::{ComputeError, RequestDiagnostic, RuntimeFailure};
use crate::iam::{Decision, Request};
use serde_json::{json, Value};
use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a reconciler observed, before policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Convergence is pending: defer, refunding the attempt (Q8); `wait` says how the
    /// convergence deadline bounds it.
    Pending {
        recheck: Duration,
        wait: Wait,
    },
    /// A dependency failed: retry with backoff, spending the attempt (Q7).
    Retry,
    /// Never retried automatically (Q9).
    Permanent,
}

/// What a pending pass waits on, which decides how the convergence deadline bounds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Convergence (R5): past the deadline the work fails `CONVERGENCE_DEADLINE_EXCEEDED`.
    Convergence,
    /// A harness's credential bootstrap (SPEC Z3): bounded like convergence, and at the
    /// deadline its candidate's failure registers its durable retirement (SPEC G2).
    Bootstrap,
    /// A failing dependency (R10): past the deadline the work fails naming it, not the
    /// deadline.
    Dependency,
    /// A wait the deadline does not bound (an execution admission's withdrawal, SPEC Z1).
    Unbounded,
    /// A draining stop's yield (SPEC Z5): unbounded while the work is younger than the
    /// deadline; past it, a dependency retry within the attempt budget, so a drain that never
    /// ends cannot hold the lane for ever.
    StopYield,
}

impl Outcome {
    /// Whether this is a draining stop's yield (SPEC Z5).
    pub fn is_stop_yield(self) -> bool {
        matches!(
            self,
            Outcome::Pending {
                wait: Wait::StopYield,
                ..
            }
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Pending { .. } => "pending",
            Outcome::Retry => "retry",
            Outcome::Permanent => "permanent",
        }
    }
}

/// An IAM refusal (N5, R2, A1, A2): the request and its decision, audited as an
/// `authorization_denial`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub request: Request,
    pub decision: Decision,
}

impl Denial {
    /// The request and the decision.
    pub fn evidence(&self) -> Value {
        json!({"request": self.request, "decision": self.decision})
    }

    /// The refusal's audit details, as an Agent denial records them.
    pub fn details(&self) -> Value {
        json!({ "denial": self.evidence() })
    }
}

/// What a pass did (STYLE 10): nothing beyond its outcome, an IAM refusal, or the facts of
/// its own reconciler (`Reconciler::Facts`), which only that reconciler's `settle` and
/// `publish` read. Every report built outside a reconciler (a Compute failure, a retried
/// database error) is `Plain`.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Facts<F> {
    /// Nothing beyond the outcome and its code.
    #[default]
    Plain,
    /// Refused by IAM before any effect.
    Denied(Box<Denial>),
    /// The reconciler's own facts.
    Own(F),
}

/// A reconciler's facts with their type erased, as the runtime carries them between a pass
/// and its publication; `dispatch` restores the type for the reconciler that made them.
#[derive(Clone)]
pub struct AnyFacts(Arc<dyn Any + Send + Sync>);

impl AnyFacts {
    /// `facts` erased; facts already erased stay as they are.
    fn new<F: Any + Send + Sync>(facts: F) -> AnyFacts {
        let boxed: Box<dyn Any + Send + Sync> = Box::new(facts);
        match boxed.downcast::<AnyFacts>() {
            Ok(erased) => *erased,
            Err(boxed) => AnyFacts(Arc::from(boxed)),
        }
    }

    fn typed<F: Any + Clone>(&self) -> Option<F> {
        self.0.downcast_ref::<F>().cloned()
    }
}

impl fmt::Debug for AnyFacts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AnyFacts(..)")
    }
}

impl PartialEq for AnyFacts {
    fn eq(&self, other: &AnyFacts) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// A report whose facts are erased: what the runtime and the publication carry.
pub type AnyReport = Report<AnyFacts>;

/// Where a pass failed, retried or deferred, for its `worker.pass-error` line: the step
/// (`prepare`, `activate`, `stop`, …) and, after a Compute error, its class, HTTP status and
/// provider reason. Never provider free text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    pub step: Option<&'static str>,
    pub class: Option<String>,
    pub status: Option<u16>,
    pub reason: Option<String>,
    /// The failure was a transient dependency's (SPEC Z12: `dependency` and `cause`).
    pub transient: bool,
    /// The dependency that failed, when it is not the Compute Driver (`database`).
    pub dependency: Option<&'static str>,
    /// The driver's request diagnostic (SPEC Z12).
    pub request: Option<RequestDiagnostic>,
    /// The class of the first cleanup that failed beside the failure (SPEC Z12).
    pub cleanup_class: Option<&'static str>,
    /// The class of a yielded predecessor stop that could not be finished before the
    /// deployment ended (SPEC Z5).
    pub predecessor_stop: Option<String>,
    /// The driver's bounded description of a failed Namespace observation (SPEC Z10).
    pub namespace_reason: Option<String>,
    /// The address the driver could not reach (`scheme://host:port`), for a transport failure.
    pub endpoint: Option<String>,
}

/// What a deployment pass spent where, for the deploy timings of `worker.completed` (SPEC Z9): the runtime adds passes of one reconcile key up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeployPhases {
    /// Predecessor stops and preparation in this pass.
    pub prepare: Duration,
    /// When this pass observed the revision unready.
    pub unready_at: Option<Instant>,
    /// When this pass observed it ready.
    pub ready_at: Option<Instant>,
}

/// What happened in a pass, with the facts `F` of the reconciler that ran it (`()` for one
/// that has none).
#[derive(Clone, Debug, PartialEq)]
pub struct Report<F = ()> {
    pub outcome: Outcome,
    pub code: String,
    pub result_data: Option<Value>,
    /// The refusal that made a candidate stop before a failure was published (R9).
    pub refusal: Option<String>,
    /// What a pending repository cleanup waits on (SPEC G3), kept with its deferral evidence.
    pub cause: Option<String>,
    /// A runtime failure seen while pending, kept for the convergence-deadline result (R5).
    pub runtime_failure: Option<RuntimeFailure>,
    /// Whether a deferral records attempt evidence (a repeated identical observation need not).
    pub record_evidence: bool,
    /// Where the pass stopped short of success (diagnostics only; never decides an outcome).
    pub failure: Failure,
    /// What the pass did, typed per reconciler, for its own `settle` and `publish`; policy
    /// never reads it.
    pub facts: Facts<F>,
    /// Where a deployment pass spent its time (SPEC Z9); diagnostics only.
    pub deploy: Option<DeployPhases>,
    /// The reconciler already published this outcome in its own claim-fenced transaction and
    /// the work row no longer exists (an Agent deletion removes its own work, A2): `finalize`
    /// resolves the report but writes nothing and makes no queue transition. Only a successful
    /// outcome may set it.
    pub already_published: bool,
    /// The code a retry fails with once the attempt budget is spent, when it is not the
    /// retry's own (a permissions refusal retries as `DEPENDENCY_UNAVAILABLE` and fails as
    /// the refusal it kept meeting).
    pub exhausted_code: Option<String>,
    /// Set by the policy: a retry that spent the attempt budget and failed (Q8).
    pub exhausted: bool,
}

impl<F> Report<F> {
    pub fn new(outcome: Outcome, code: &str) -> Report<F> {
        Report {
            outcome,
            code: code.to_string(),
            result_data: None,
            refusal: None,
            cause: None,
            runtime_failure: None,
            record_evidence: true,
            failure: Failure::default(),
            facts: Facts::Plain,
            deploy: None,
            already_published: false,
            exhausted_code: None,
            exhausted: false,
        }
    }

    pub fn success(code: &str) -> Report<F> {
        Report::new(Outcome::Success, code)
    }

    pub fn pending(code: &str, recheck: Duration) -> Report<F> {
        Report::waiting(code, recheck, Wait::Convergence)
    }

    /// Pending on `wait`.
    pub fn waiting(code: &str, recheck: Duration, wait: Wait) -> Report<F> {
        Report::new(Outcome::Pending { recheck, wait }, code)
    }

    pub fn retry(code: &str) -> Report<F> {
        Report::new(Outcome::Retry, code)
    }

    pub fn permanent(code: &str) -> Report<F> {
        Report::new(Outcome::Permanent, code)
    }

    pub fn with_facts(mut self, facts: Facts<F>) -> Report<F> {
        self.facts = facts;
        self
    }

    /// Names the step the pass stopped at (keeps an earlier one).
    pub fn at(mut self, step: &'static str) -> Report<F> {
        self.failure.step.get_or_insert(step);
        self
    }

    /// Records the Compute error behind this report: class, status and one-word reason.
    pub fn with_compute_error(mut self, e: &ComputeError) -> Report<F> {
        self.failure.class = Some(e.class().to_string());
        self.failure.status = e.status();
        self.failure.reason = e
            .reason()
            .filter(|r| r.len() <= 64 && r.chars().all(|c| c.is_ascii_alphabetic()))
            .map(String::from);
        self.failure.transient = e.is_transient();
        self.failure.request = e.request().cloned();
        self.failure.cleanup_class = e.cleanup_class();
        self.failure.endpoint = e.endpoint().map(String::from);
        self
    }

    pub fn with_result(mut self, data: Value) -> Report<F> {
        self.result_data = Some(data);
        self
    }

    /// The same report with other facts.
    pub fn map_facts<G>(self, facts: Facts<G>) -> Report<G> {
        Report {
            outcome: self.outcome,
            code: self.code,
            result_data: self.result_data,
            refusal: self.refusal,
            cause: self.cause,
            runtime_failure: self.runtime_failure,
            record_evidence: self.record_evidence,
            failure: self.failure,
            facts,
            deploy: self.deploy,
            already_published: self.already_published,
            exhausted_code: self.exhausted_code,
            exhausted: self.exhausted,
        }
    }
}

impl<F: Any + Send + Sync> Report<F> {
    /// The report with its facts erased, for the runtime.
    pub fn erase(mut self) -> AnyReport {
        let facts = match std::mem::take(&mut self.facts) {
            Facts::Plain => Facts::Plain,
            Facts::Denied(d) => Facts::Denied(d),
            Facts::Own(f) => Facts::Own(AnyFacts::new(f)),
        };
        self.map_facts(facts)
    }
}

impl AnyReport {
    /// The report with the facts of the reconciler that made it; `None` when they are another
    /// type's (a report handed to the wrong reconciler, a broken invariant).
    pub fn typed<F: Any + Clone>(mut self) -> Option<Report<F>> {
        let facts = match std::mem::take(&mut self.facts) {
            Facts::Plain => Facts::Plain,
            Facts::Denied(d) => Facts::Denied(d),
            Facts::Own(f) => Facts::Own(f.typed::<F>()?),
        };
        Some(self.map_facts(facts))
    }
}
