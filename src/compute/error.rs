//! `ComputeError` and its `ComputeErrorKind` (SPEC C1, Z3, Z6, Z10): what a driver's failure
//! is, for the reconcilers' policy, with bounded evidence that is always safe to log. It never
//! carries provider free text.

use crate::cancel::Cancelled;
use std::fmt;

/// The documented kinds of driver errors; reconcilers map them to queue outcomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComputeErrorKind {
    /// The infrastructure API or gateway is unavailable (connection refused, 429, 5xx):
    /// convergence may defer without spending attempts (SPEC R10).
    TransientDependency,
    /// An error that may succeed on retry within the attempt budget.
    Retryable,
    /// A stop whose runtime is still draining (Pods terminating, SPEC Z5): the worker ends the
    /// pass pending with a stop-yield code, refunds the attempt and is exempt from the
    /// convergence deadline. Never a failure.
    Draining,
    /// The driver refuses the request for good, with a stable code.
    Permanent(String),
    /// The infrastructure refused the request on its permissions (an RBAC 403): retried as
    /// `DEPENDENCY_UNAVAILABLE` within the attempt budget, since a grant just made takes a
    /// moment to reach every API server; the work fails with this code once the budget is
    /// spent. (Boxed: `ComputeError` stays within clippy's size for an error.)
    Denied(Box<str>),
    /// The request cannot succeed until something outside the worker changes (a ResourceQuota
    /// used up): the work waits with this pending code, refunding the attempt, within the
    /// convergence deadline (revision work), or retries within its budget (other work).
    Pending(&'static str),
    /// The pass has waited on infrastructure as long as it may (its patience, SPEC Q10) and
    /// the next request would wait `after` more (a client-side rate limit, a 429's
    /// `Retry-After`): the pass ends pending with `code`, refunding the attempt, and comes back
    /// after at least `after`. Nothing is refused; only the wait moves out of the claim.
    Deferred {
        code: &'static str,
        after: std::time::Duration,
    },
    /// The pass was cancelled at an HTTP boundary.
    Cancelled(Cancelled),
}

/// A driver's description of a failed preparation (SPEC Z6): the
/// worker emits `worker.compute-prepare-failed` only when every field is within its bounds
/// (`valid`), and never lets it change the outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareDiagnostic {
    /// `^[A-Z][A-Z0-9_]{0,63}$`.
    pub code: String,
    /// Where preparation failed, `^[a-z][a-z0-9_]{0,63}$`.
    pub stage: String,
    /// `^[A-Za-z][A-Za-z0-9]{0,63}$`.
    pub error_class: Option<String>,
    /// At most 256 printable characters.
    pub message: Option<String>,
    /// 0-999.
    pub status: Option<u32>,
}

impl PrepareDiagnostic {
    pub fn new(code: &str, stage: &str) -> PrepareDiagnostic {
        PrepareDiagnostic {
            code: code.into(),
            stage: stage.into(),
            error_class: None,
            message: None,
            status: None,
        }
    }

    /// Whether every field is within the seed's bounds.
    pub fn valid(&self) -> bool {
        let token = |v: &str, first: fn(char) -> bool, rest: fn(char) -> bool| {
            let mut chars = v.chars();
            v.len() <= 64 && chars.next().is_some_and(first) && chars.all(rest)
        };
        token(
            &self.code,
            |c| c.is_ascii_uppercase(),
            |c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_',
        ) && token(
            &self.stage,
            |c| c.is_ascii_lowercase(),
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_',
        ) && self.error_class.as_deref().is_none_or(|v| {
            token(
                v,
                |c| c.is_ascii_alphabetic(),
                |c| c.is_ascii_alphanumeric(),
            )
        }) && self.message.as_deref().is_none_or(printable)
            && self.status.is_none_or(|s| s <= 999)
    }
}

/// A driver's fixed request diagnostic: the method it called,
/// a gRPC status and a validation category, each when the driver knows it. Never free text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestDiagnostic {
    /// `^[A-Za-z][A-Za-z0-9_.]{0,63}$` (an HTTP verb or RPC name).
    pub method: Option<String>,
    /// 0-16.
    pub grpc_status: Option<u8>,
    /// `^[a-z][a-z0-9_]{0,63}$`.
    pub validation_category: Option<String>,
}

/// At most 256 characters, none of them a control character (SPEC Z10).
pub fn printable(value: &str) -> bool {
    value.chars().count() <= 256 && value.chars().all(|c| c >= ' ' && c != '\u{7f}')
}

/// A driver error. It carries codes, classes and HTTP statuses only, never provider free
/// text, so it is always safe to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeError {
    kind: ComputeErrorKind,
    /// A short stable class, e.g. `docker_api`, `io`, `decode`.
    class: &'static str,
    status: Option<u16>,
    /// A provider reason code when the API gives one (Kubernetes Status reason).
    reason: Option<String>,
    /// What else the driver said, when it said anything (boxed: the error stays small).
    details: Option<Box<Details>>,
}

/// A failed preparation (SPEC Z3): the driver's bounded evidence, when it has some.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Preparation {
    evidence: Option<serde_json::Value>,
}

/// A `ComputeError`'s optional evidence; every field is bounded and safe to log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Details {
    /// The driver's description of a failed preparation (SPEC Z6).
    diagnostic: Option<PrepareDiagnostic>,
    /// The driver's request diagnostic (SPEC Z12).
    request: Option<RequestDiagnostic>,
    /// The class of the first cleanup that failed after this failure (SPEC Z12): this error
    /// still decides the outcome.
    cleanup_class: Option<&'static str>,
    /// Where the driver could not connect: `scheme://host:port` of the API it talks to, never
    /// a path, query or credential.
    endpoint: Option<String>,
    /// The code a retry or wait keeps instead of `DEPENDENCY_UNAVAILABLE` (a lifecycle
    /// hook's, SPEC H4).
    retry_code: Option<String>,
    /// A failed preparation (SPEC Z3), with the driver's evidence when it has some.
    preparation: Option<Preparation>,
}

impl ComputeError {
    /// A wait on something outside the worker, with its pending code.
    pub fn pending(code: &'static str, class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Pending(code),
            ..ComputeError::transient(class, status)
        }
    }

    /// A wait the pass leaves to a later pass (`ComputeErrorKind::Deferred`).
    pub fn deferred(
        code: &'static str,
        class: &'static str,
        after: std::time::Duration,
    ) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Deferred { code, after },
            ..ComputeError::transient(class, None)
        }
    }

    pub fn transient(class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::TransientDependency,
            class,
            status,
            reason: None,
            details: None,
        }
    }

    pub fn retryable(class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Retryable,
            class,
            status,
            reason: None,
            details: None,
        }
    }

    /// A stop still draining (SPEC Z5).
    pub fn draining(class: &'static str) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Draining,
            class,
            status: None,
            reason: None,
            details: None,
        }
    }

    /// A refusal on permissions (`ComputeErrorKind::Denied`), failing with `code` once retries
    /// are spent.
    pub fn denied(code: &str, class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Denied(code.into()),
            ..ComputeError::permanent(code, class, status)
        }
    }

    pub fn permanent(code: &str, class: &'static str, status: Option<u16>) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Permanent(code.to_string()),
            class,
            status,
            reason: None,
            details: None,
        }
    }

    /// A preparation that failed for good (SPEC Z3): permanent with `code`, carrying the
    /// driver's evidence (`{preparation: evidence}` in the failed work's result data). The
    /// failure registers the revision's `failed-preparation` repository cleanup, which stops
    /// its runtime (SPEC G2, G3).
    pub fn preparation_failed(
        code: &str,
        class: &'static str,
        evidence: Option<serde_json::Value>,
    ) -> ComputeError {
        let mut e = ComputeError::permanent(code, class, None);
        e.details_mut().preparation = Some(Preparation { evidence });
        e
    }

    /// Whether this is a failed preparation (SPEC Z3).
    pub fn is_preparation_failure(&self) -> bool {
        self.details
            .as_ref()
            .is_some_and(|d| d.preparation.is_some())
    }

    /// A failed preparation's evidence (SPEC Z3).
    pub fn preparation_evidence(&self) -> Option<&serde_json::Value> {
        self.details
            .as_ref()?
            .preparation
            .as_ref()?
            .evidence
            .as_ref()
    }

    pub fn cancelled(cancelled: Cancelled) -> ComputeError {
        ComputeError {
            kind: ComputeErrorKind::Cancelled(cancelled),
            class: "cancelled",
            status: None,
            reason: None,
            details: None,
        }
    }

    /// The same error, naming the address the driver could not reach.
    pub fn with_endpoint(mut self, endpoint: &str) -> ComputeError {
        self.details_mut().endpoint = Some(endpoint.into());
        self
    }

    /// The address the driver could not reach, for a transport failure.
    pub fn endpoint(&self) -> Option<&str> {
        self.details.as_ref()?.endpoint.as_deref()
    }

    fn details_mut(&mut self) -> &mut Details {
        self.details.get_or_insert_with(Box::default)
    }

    /// The same error, retried or waited on with `code` instead of `DEPENDENCY_UNAVAILABLE`.
    pub fn with_retry_code(mut self, code: &str) -> ComputeError {
        self.details_mut().retry_code = Some(code.into());
        self
    }

    /// The code a retry or a wait on this error carries (SPEC H4, R10).
    pub fn retry_code(&self) -> &str {
        self.details
            .as_ref()
            .and_then(|d| d.retry_code.as_deref())
            .unwrap_or("DEPENDENCY_UNAVAILABLE")
    }

    /// Attaches a provider reason code, bounded to a code-like token (at most 64 letters,
    /// digits and underscores).
    pub fn with_reason(mut self, reason: &str) -> ComputeError {
        let bounded: String = reason
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect();
        if !bounded.is_empty() {
            self.reason = Some(bounded);
        }
        self
    }

    /// Attaches the driver's description of a failed preparation (SPEC Z6).
    pub fn with_diagnostic(mut self, diagnostic: PrepareDiagnostic) -> ComputeError {
        self.details_mut().diagnostic = Some(diagnostic);
        self
    }

    /// Attaches the driver's request diagnostic (SPEC Z12).
    pub fn with_request(mut self, request: RequestDiagnostic) -> ComputeError {
        self.details_mut().request = Some(request);
        self
    }

    /// Records that a cleanup after this failure failed too, with its class (SPEC Z12).
    pub fn with_failed_cleanup(mut self, class: &'static str) -> ComputeError {
        self.details_mut().cleanup_class = Some(class);
        self
    }

    pub fn diagnostic(&self) -> Option<&PrepareDiagnostic> {
        self.details.as_ref()?.diagnostic.as_ref()
    }

    pub fn request(&self) -> Option<&RequestDiagnostic> {
        self.details.as_ref()?.request.as_ref()
    }

    pub fn cleanup_class(&self) -> Option<&'static str> {
        self.details.as_ref()?.cleanup_class
    }

    pub fn kind(&self) -> &ComputeErrorKind {
        &self.kind
    }

    pub fn class(&self) -> &'static str {
        self.class
    }

    pub fn status(&self) -> Option<u16> {
        self.status
    }

    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    pub fn is_transient(&self) -> bool {
        self.kind == ComputeErrorKind::TransientDependency
    }
}

impl From<Cancelled> for ComputeError {
    fn from(cancelled: Cancelled) -> ComputeError {
        ComputeError::cancelled(cancelled)
    }
}

impl fmt::Display for ComputeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ComputeErrorKind::TransientDependency => write!(f, "compute dependency unavailable")?,
            ComputeErrorKind::Retryable => write!(f, "compute request failed")?,
            ComputeErrorKind::Draining => write!(f, "compute stop still draining")?,
            ComputeErrorKind::Permanent(code) => write!(f, "compute refused: {code}")?,
            ComputeErrorKind::Denied(code) => write!(f, "compute denied: {code}")?,
            ComputeErrorKind::Pending(code) => write!(f, "compute pending: {code}")?,
            ComputeErrorKind::Deferred { code, after } => {
                write!(f, "compute deferred: {code} for {} ms", after.as_millis())?
            }
            ComputeErrorKind::Cancelled(c) => write!(f, "{c}")?,
        }
        write!(f, " (class {}", self.class)?;
        if let Some(status) = self.status {
            write!(f, ", status {status}")?;
        }
        if let Some(reason) = &self.reason {
            write!(f, ", reason {reason}")?;
        }
        if let Some(endpoint) = self.endpoint() {
            write!(f, ", at {endpoint}")?;
        }
        write!(f, ")")
    }
}

impl std::error::Error for ComputeError {}
