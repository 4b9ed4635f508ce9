//! Prometheus metrics (SPEC W6): passes by operation and outcome, pass duration, Compute call
//! durations by effect, queue depth, claims lost. The HELP texts are listed in docs/operating.md. Owns the registry; never blocks a pass.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub passes: IntCounterVec,
    pub pass_duration: HistogramVec,
    pub effect_duration: HistogramVec,
    pub queue_depth: IntGaugeVec,
    pub claims_lost: IntCounterVec,
    /// Seconds from admission (the work's creation, database clock) to a deployment's
    /// activation or an Agent's stop, by operation `deploy` or `stop` (seed 3102, 6493).
    pub agent_operation_duration: HistogramVec,
    /// Claim or recovery statements that failed, by error class (`DatabaseError:22008`).
    pub claim_failures: IntCounterVec,
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
        for c in [
            Box::new(passes.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(pass_duration.clone()),
            Box::new(effect_duration.clone()),
            Box::new(queue_depth.clone()),
            Box::new(claims_lost.clone()),
            Box::new(agent_operation_duration.clone()),
            Box::new(claim_failures.clone()),
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
        }
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
