//! Prometheus metrics (SPEC W6): passes by operation, outcome and reason code, pass duration,
//! Compute call durations by effect, queue depth and age, claims lost, transient dependency
//! failures and whether the database answers. The HELP texts are listed in docs/operating.md;
//! deploy/observability/ queries them (a test keeps both in step). Every label value known when
//! the registry is built, or the runtime announces (`announce`), is set to zero at once, so a fresh worker exports every series an
//! alert's `rate` needs. Owns the registry; never blocks a pass.

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// The `outcome` label values of `occ_worker_passes_total`.
pub const PASS_OUTCOMES: [&str; 7] = [
    "success",
    "pending",
    "retry",
    "permanent",
    "interrupted",
    "claim_lost",
    "error",
];

/// The `effect` label values of `occ_worker_effect_duration_seconds`.
pub const EFFECTS: [&str; 6] = [
    "deploy",
    "bind",
    "stop",
    "retire",
    "credentials",
    "withdraw",
];

/// The `cause` label values of `occ_worker_claims_lost_total` (SPEC W3).
pub const LOSS_CAUSES: [&str; 5] = [
    "CLAIM_RENEWAL_REFUSED",
    "CLAIM_RENEWAL_LATE",
    "CLAIM_RENEWAL_FAILED",
    "CLAIM_LEASE_LAPSED",
    "CLAIM_LOST",
];

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub passes: IntCounterVec,
    pub pass_duration: HistogramVec,
    pub effect_duration: HistogramVec,
    pub queue_depth: IntGaugeVec,
    pub claims_lost: IntCounterVec,
    /// Seconds from admission (the work's creation, database clock) to a deployment's
    /// activation or an Agent's stop, by operation `deploy` or `stop` (SPEC W6, Z9).
    pub agent_operation_duration: HistogramVec,
    /// Claim or recovery statements that failed, by error class (`DatabaseError:22008`).
    pub claim_failures: IntCounterVec,
    /// Finished passes by operation and reason code (SPEC Z8's codes).
    pub pass_codes: IntCounterVec,
    /// Passes that ended on a transient dependency failure, by dependency (`database` or the
    /// Compute implementation, as `worker.completed` names it).
    pub dependency_failures: IntCounterVec,
    /// 1 while the readiness probe's last query was answered, else 0.
    pub database_up: IntGauge,
    /// Seconds the oldest claimable work has been due (0 when none is).
    pub queue_oldest_due: Gauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let buckets = vec![0.005, 0.025, 0.1, 0.25, 1.0, 2.5, 10.0, 30.0, 120.0];
        let passes = IntCounterVec::new(
            Opts::new("occ_worker_passes_total", "Finished passes by operation and outcome: success, pending, retry, permanent (the reconciler's report), interrupted (stopped by shutdown), claim_lost, error"),
            &["operation", "outcome"],
        )
        .expect("valid metric");
        let pass_duration = HistogramVec::new(
            HistogramOpts::new(
                "occ_worker_pass_duration_seconds",
                "Seconds from the start of a pass to its outcome, by operation",
            )
            .buckets(buckets.clone()),
            &["operation"],
        )
        .expect("valid metric");
        let effect_duration = HistogramVec::new(
            HistogramOpts::new(
                "occ_worker_effect_duration_seconds",
                "Seconds per Compute Driver call made under an Agent or revision claim, by effect: deploy, bind, stop, retire, credentials",
            )
            .buckets(buckets),
            &["effect"],
        )
        .expect("valid metric");
        let queue_depth = IntGaugeVec::new(
            Opts::new("occ_worker_queue_depth", "Work rows queued and claimed, read from the database when /readyz or /metrics is served"),
            &["state"],
        )
        .expect("valid metric");
        let claims_lost = IntCounterVec::new(
            Opts::new("occ_worker_claims_lost_total", "Passes that lost their claim, by cause: CLAIM_RENEWAL_REFUSED, CLAIM_RENEWAL_LATE, CLAIM_RENEWAL_FAILED, CLAIM_LEASE_LAPSED, CLAIM_LOST"),
            &["cause"],
        )
        .expect("valid metric");
        let agent_operation_duration = HistogramVec::new(
            HistogramOpts::new(
                "occ_worker_agent_operation_duration_seconds",
                "Seconds from admission to a deployment's activation (deploy) or an Agent's stop (stop), measured on the database clock",
            )
            .buckets(vec![0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0]),
            &["operation"],
        )
        .expect("valid metric");
        let claim_failures = IntCounterVec::new(
            Opts::new(
                "occ_worker_claim_failures_total",
                "Failed claim and recovery statements by error class",
            ),
            &["cause"],
        )
        .expect("valid metric");
        let pass_codes = IntCounterVec::new(
            Opts::new(
                "occ_worker_pass_codes_total",
                "Finished passes by operation and reason code",
            ),
            &["operation", "code"],
        )
        .expect("valid metric");
        let dependency_failures = IntCounterVec::new(
            Opts::new(
                "occ_worker_dependency_failures_total",
                "Passes that ended on a transient dependency failure, by dependency: database or the Compute implementation",
            ),
            &["dependency"],
        )
        .expect("valid metric");
        let database_up = IntGauge::new(
            "occ_worker_database_up",
            "1 while the readiness probe's last query was answered, else 0",
        )
        .expect("valid metric");
        let queue_oldest_due = Gauge::new(
            "occ_worker_queue_oldest_due_seconds",
            "Seconds the oldest claimable work has been due, read with the queue depth (0 when none is)",
        )
        .expect("valid metric");
        for effect in EFFECTS {
            effect_duration.with_label_values(&[effect]);
        }
        for cause in LOSS_CAUSES {
            claims_lost.with_label_values(&[cause]);
        }
        for state in ["queued", "claimed"] {
            queue_depth.with_label_values(&[state]);
        }
        dependency_failures.with_label_values(&["database"]);
        for operation in ["deploy", "stop"] {
            agent_operation_duration.with_label_values(&[operation]);
        }
        for c in [
            Box::new(passes.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(pass_duration.clone()),
            Box::new(effect_duration.clone()),
            Box::new(queue_depth.clone()),
            Box::new(claims_lost.clone()),
            Box::new(agent_operation_duration.clone()),
            Box::new(claim_failures.clone()),
            Box::new(pass_codes.clone()),
            Box::new(dependency_failures.clone()),
            Box::new(database_up.clone()),
            Box::new(queue_oldest_due.clone()),
        ] {
            registry.register(c).expect("unique metric");
        }
        Metrics {
            registry,
            passes,
            pass_duration,
            effect_duration,
            queue_depth,
            claims_lost,
            agent_operation_duration,
            claim_failures,
            pass_codes,
            dependency_failures,
            database_up,
            queue_oldest_due,
        }
    }

    /// Sets to zero the series of every operation's passes and durations, and those of the
    /// Compute implementation's transient failures, so an alert on them has a series before
    /// the first pass or failure (the registry knows neither; the runtime does).
    pub fn announce<'a>(&self, operations: impl IntoIterator<Item = &'a str>, compute: &str) {
        for operation in operations {
            self.pass_duration.with_label_values(&[operation]);
            for outcome in PASS_OUTCOMES {
                self.passes.with_label_values(&[operation, outcome]);
            }
        }
        self.dependency_failures.with_label_values(&[compute]);
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}
