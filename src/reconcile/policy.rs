//! The policy (Q7-Q9, R10, Z5): what a report becomes given the attempt budget and the
//! convergence deadline. Pure: a reconciler says what happened, only `resolve` decides retry,
//! defer or fail.

use super::report::{Outcome, Report, Wait};
use serde_json::json;
use std::time::Duration;

/// The code of a pending report the convergence deadline ended (R5).
pub const DEADLINE_EXCEEDED: &str = "CONVERGENCE_DEADLINE_EXCEEDED";

/// A refusal stored with a refused candidate's stop wait (R9), parsed: the convergence
/// deadline's own, which publishes its timeout, or another code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredRefusal {
    Deadline,
    Code(String),
}

impl StoredRefusal {
    pub fn parse(code: &str) -> StoredRefusal {
        match code {
            DEADLINE_EXCEEDED => StoredRefusal::Deadline,
            other => StoredRefusal::Code(other.to_string()),
        }
    }
}

/// The policy: what a report becomes given the attempt budget and the convergence deadline.
pub fn resolve<F>(
    report: Report<F>,
    attempt: i32,
    max_attempts: i32,
    age: Duration,
    convergence_timeout: Duration,
) -> Report<F> {
    let expired = age >= convergence_timeout;
    // A refused candidate whose stop is still pending keeps waiting past the deadline: the
    // work never ends with the refused candidate running (R9). Its failure is published once
    // the stop succeeds.
    let bounded = report.refusal.is_none();
    match report.outcome {
        // A stop still draining when the work reaches the deadline stops yielding: it retries
        // as a failing dependency, spending the attempt, and fails at the budget's end.
        Outcome::Pending {
            wait: Wait::StopYield,
            ..
        } if expired => {
            let exhausted = attempt >= max_attempts;
            let outcome = if exhausted {
                Outcome::Permanent
            } else {
                Outcome::Retry
            };
            Report {
                outcome,
                exhausted,
                code: "DEPENDENCY_UNAVAILABLE".into(),
                record_evidence: true,
                ..report
            }
        }
        Outcome::Pending {
            wait: Wait::Dependency,
            ..
        } if expired && bounded => Report {
            outcome: Outcome::Permanent,
            ..report
        },
        Outcome::Pending {
            wait: Wait::Convergence | Wait::Bootstrap,
            ..
        } if expired && bounded => {
            let mut data = json!({ "timeoutMs": convergence_timeout.as_millis() as u64 });
            if let Some(failure) = &report.runtime_failure {
                data["runtimeFailure"] = json!(failure);
            }
            Report {
                outcome: Outcome::Permanent,
                code: DEADLINE_EXCEEDED.into(),
                result_data: Some(data),
                ..report
            }
        }
        Outcome::Retry if attempt >= max_attempts => Report {
            outcome: Outcome::Permanent,
            code: report.exhausted_code.clone().unwrap_or(report.code),
            exhausted: true,
            ..report
        },
        _ => report,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report with no facts of its own.
    type Report = super::Report<()>;
    use crate::compute::RuntimeFailure;

    #[test]
    fn pending_past_the_deadline_fails_with_its_timeout() {
        let mut report = Report::pending("REVISION_INCOMPLETE", Duration::from_secs(1));
        report.runtime_failure = Some(RuntimeFailure::new("CRASH_LOOP"));
        let r = resolve(
            report,
            1,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(r.outcome, Outcome::Permanent);
        assert_eq!(r.code, "CONVERGENCE_DEADLINE_EXCEEDED");
        assert_eq!(
            r.result_data,
            Some(json!({"timeoutMs": 5000, "runtimeFailure": {"code": "CRASH_LOOP"}}))
        );
    }

    #[test]
    fn a_retry_out_of_attempts_fails_with_its_exhausted_code() {
        // A refusal on permissions retries as DEPENDENCY_UNAVAILABLE and fails as itself.
        let mut report = Report::retry("DEPENDENCY_UNAVAILABLE");
        report.exhausted_code = Some("KUBERNETES_FORBIDDEN".into());
        let early = resolve(report.clone(), 4, 5, Duration::ZERO, Duration::from_secs(5));
        assert_eq!(
            (early.outcome, early.code.as_str()),
            (Outcome::Retry, "DEPENDENCY_UNAVAILABLE")
        );
        assert!(!early.exhausted);
        let last = resolve(report, 5, 5, Duration::ZERO, Duration::from_secs(5));
        assert!(last.exhausted, "the budget is spent");
        assert_eq!(
            (last.outcome, last.code.as_str()),
            (Outcome::Permanent, "KUBERNETES_FORBIDDEN")
        );
    }

    #[test]
    fn a_dependency_still_failing_at_the_deadline_is_named() {
        // SPEC R10: the deadline names the failing dependency.
        let report = Report::waiting(
            "DEPENDENCY_UNAVAILABLE",
            Duration::from_secs(1),
            Wait::Dependency,
        );
        let r = resolve(
            report,
            1,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(r.outcome, Outcome::Permanent);
        assert_eq!(r.code, "DEPENDENCY_UNAVAILABLE");
        assert_eq!(r.result_data, None);
    }

    #[test]
    fn a_pending_refused_candidate_stop_outlives_the_deadline() {
        let mut report = Report::pending("REFUSED_CANDIDATE_STOP_PENDING", Duration::from_secs(1));
        report.refusal = Some("AUTHORIZATION_DENIED".into());
        let r = resolve(
            report.clone(),
            1,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(r, report);
    }

    #[test]
    fn a_draining_stop_yields_before_the_deadline_and_retries_within_the_budget_after() {
        // SPEC Z5: a stop yield is pending while the work is younger than
        // the deadline; past it, a dependency retry that spends the attempt, and a failure at
        // the budget's end, so the lane moves on.
        let mut report = Report::waiting(
            "AGENT_STOP_YIELDED",
            Duration::from_secs(1),
            Wait::StopYield,
        );
        report.record_evidence = false;
        let young = resolve(
            report.clone(),
            1,
            5,
            Duration::from_secs(4),
            Duration::from_secs(5),
        );
        assert_eq!(young, report);
        let old = resolve(
            report.clone(),
            2,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(
            (old.outcome, old.code.as_str(), old.record_evidence),
            (Outcome::Retry, "DEPENDENCY_UNAVAILABLE", true)
        );
        let last = resolve(
            report,
            5,
            5,
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        assert_eq!(
            (last.outcome, last.code.as_str()),
            (Outcome::Permanent, "DEPENDENCY_UNAVAILABLE")
        );
    }

    #[test]
    fn retry_at_the_attempt_limit_is_permanent() {
        let r = resolve(
            Report::retry("X"),
            5,
            5,
            Duration::ZERO,
            Duration::from_secs(5),
        );
        assert_eq!(r.outcome, Outcome::Permanent);
        let r = resolve(
            Report::retry("X"),
            4,
            5,
            Duration::ZERO,
            Duration::from_secs(5),
        );
        assert_eq!(r.outcome, Outcome::Retry);
    }
}
