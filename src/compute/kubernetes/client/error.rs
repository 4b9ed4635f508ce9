//! `KubeError`, what a Kubernetes request's failure is (SPEC C3, Z10): its documented kind
//! from the answer's `Status` (`classify`, by structured fields, never by message text) or the
//! transport, and its mapping to a `ComputeError` (`into_compute`). It never carries the API's
//! message text, a body or a token, so it is always safe to log.

use super::{endpoint_of, path_template, Method, Reply};
use crate::cancel::Cancelled;
use crate::compute::{ComputeError, RequestDiagnostic};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;

/// The documented kinds of Kubernetes request errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeErrorKind {
    /// 403 because a ResourceQuota of the namespace is used up: waits, never an RBAC denial.
    QuotaExceeded,
    /// 409 with reason `AlreadyExists`: a create found the object.
    AlreadyExists,
    /// 409 otherwise: a stale `resourceVersion` or a concurrent change.
    Conflict,
    /// 403 because the namespace is being deleted (a `NamespaceTerminating` cause).
    NamespaceTerminating,
    /// 403 otherwise: RBAC refused the request.
    Forbidden,
    /// 401, after one retry with a re-read token file.
    Unauthorized,
    /// 422 with the first cause's field, e.g. `spec.template.spec.containers[0].image`.
    Invalid { field: Option<String> },
    /// 400.
    BadRequest,
    /// 404 where absence is not an answer (create in a missing namespace, replace, patch).
    NotFound,
    /// 429 after `MAX_THROTTLE_RETRIES` retries.
    TooManyRequests,
    /// Not sent: the pass's patience for waits is spent and the client-side rate limit (or a
    /// 429's `Retry-After`) would hold the request this much longer (SPEC Q10).
    Throttled(std::time::Duration),
    /// 5xx.
    Unavailable,
    /// No answer: connect, TLS, read or timeout failure.
    Transport,
    /// An answer that is not the JSON expected, or larger than `BODY_LIMIT`.
    Decode,
    /// The pass's token was cancelled before or during the request.
    Cancelled(Cancelled),
    /// Any other status.
    Other,
}

impl KubeErrorKind {
    fn as_str(&self) -> &'static str {
        match self {
            KubeErrorKind::AlreadyExists => "already exists",
            KubeErrorKind::QuotaExceeded => "quota exceeded",
            KubeErrorKind::Conflict => "conflict",
            KubeErrorKind::NamespaceTerminating => "namespace terminating",
            KubeErrorKind::Forbidden => "forbidden",
            KubeErrorKind::Unauthorized => "unauthorized",
            KubeErrorKind::Invalid { .. } => "invalid",
            KubeErrorKind::BadRequest => "bad request",
            KubeErrorKind::NotFound => "not found",
            KubeErrorKind::TooManyRequests => "too many requests",
            KubeErrorKind::Throttled(_) => "throttled",
            KubeErrorKind::Unavailable => "unavailable",
            KubeErrorKind::Transport => "transport failure",
            KubeErrorKind::Decode => "undecodable answer",
            KubeErrorKind::Cancelled(_) => "cancelled",
            KubeErrorKind::Other => "unexpected answer",
        }
    }
}

/// The pending code of a pass that left a wait on the client's rate limit (or a 429's
/// `Retry-After`) to a later pass (SPEC Q10).
pub const THROTTLED: &str = "KUBERNETES_CLIENT_THROTTLED";

/// A Kubernetes request error: kind, HTTP status, Status reason, method and path template.
/// It never carries the API's message text, so it is always safe to log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeError {
    kind: KubeErrorKind,
    status: Option<u16>,
    reason: Option<String>,
    method: &'static str,
    pub(super) path: String,
    /// The API server's `scheme://host:port`, for a transport failure.
    endpoint: Option<String>,
}

impl KubeError {
    pub(super) fn new(kind: KubeErrorKind, method: Method, path: &str) -> KubeError {
        KubeError {
            kind,
            status: None,
            reason: None,
            method: method.as_str(),
            path: path_template(path),
            endpoint: None,
        }
    }

    /// A call whose budget ran out before its request went out: the transport timeout a
    /// request cut short on the wire is.
    pub(super) fn timed_out(method: Method, path: &str, server: &str) -> KubeError {
        let mut e = KubeError::new(KubeErrorKind::Transport, method, path);
        e.reason = Some("Timeout".to_string());
        e.endpoint = Some(endpoint_of(server));
        e
    }

    /// A request the pass's patience does not let wait `wait` for (SPEC Q10).
    pub(super) fn throttled(method: Method, path: &str, wait: std::time::Duration) -> KubeError {
        KubeError::new(KubeErrorKind::Throttled(wait), method, path)
    }

    pub(super) fn cancelled(method: Method, path: &str, cancelled: Cancelled) -> KubeError {
        KubeError::new(KubeErrorKind::Cancelled(cancelled), method, path)
    }

    pub(super) fn decode(method: Method, path: &str, status: Option<u16>) -> KubeError {
        let mut error = KubeError::new(KubeErrorKind::Decode, method, path);
        error.status = status;
        log::debug!(
            "kubernetes {} {}: undecodable answer",
            method.as_str(),
            error.path
        );
        error
    }

    pub(super) fn from_reply(method: Method, path: &str, reply: &Reply) -> KubeError {
        let mut error = KubeError::new(classify(reply.status, &reply.body), method, path);
        error.status = Some(reply.status);
        error.reason = parse_status(&reply.body).and_then(|s| s.reason.as_deref().map(bounded));
        match &error.kind {
            KubeErrorKind::Invalid { field } => log::debug!(
                "kubernetes {} {}: status {} reason {:?} field {:?}",
                error.method,
                error.path,
                reply.status,
                error.reason,
                field
            ),
            _ => log::debug!(
                "kubernetes {} {}: status {} reason {:?}",
                error.method,
                error.path,
                reply.status,
                error.reason
            ),
        }
        error
    }

    pub fn kind(&self) -> &KubeErrorKind {
        &self.kind
    }

    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The Status reason, e.g. `AlreadyExists`, bounded to letters, digits and `_`.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    pub fn is_cancelled(&self) -> bool {
        matches!(self.kind, KubeErrorKind::Cancelled(_))
    }

    /// The request diagnostic of a failed request (SPEC Z12): the HTTP verb.
    pub fn diagnostic(&self) -> RequestDiagnostic {
        RequestDiagnostic {
            method: Some(self.method.to_string()),
            ..RequestDiagnostic::default()
        }
    }

    /// The default mapping to a driver error. `permanent_code` names permanent refusals that
    /// have no code of their own (400 `BadRequest`); a forbidden request is a refusal on
    /// permissions (`KUBERNETES_FORBIDDEN`, retried within the budget), an invalid one keeps
    /// `KUBERNETES_INVALID_REQUEST`, a quota refusal waits, and a
    /// 401 that outlived the token's re-read retries. Callers that treat `AlreadyExists`,
    /// `NotFound` or `NamespaceTerminating` as answers handle them before mapping.
    pub fn into_compute(self, permanent_code: &str) -> ComputeError {
        const CLASS: &str = "kubernetes";
        let status = self.status;
        let error = match self.kind {
            KubeErrorKind::Transport
            | KubeErrorKind::Unavailable
            | KubeErrorKind::TooManyRequests => ComputeError::transient(CLASS, status),
            KubeErrorKind::AlreadyExists
            | KubeErrorKind::Conflict
            | KubeErrorKind::NamespaceTerminating
            | KubeErrorKind::NotFound
            | KubeErrorKind::Other => ComputeError::retryable(CLASS, status),
            KubeErrorKind::Forbidden => ComputeError::denied("KUBERNETES_FORBIDDEN", CLASS, status),
            KubeErrorKind::QuotaExceeded => {
                ComputeError::pending("NAMESPACE_QUOTA_EXCEEDED", CLASS, status)
            }
            // Still refused after the token was read again: a credential being rotated or a
            // binding being replaced, retried within the attempt budget.
            KubeErrorKind::Unauthorized => {
                ComputeError::retryable(CLASS, status).with_reason("Unauthorized")
            }
            KubeErrorKind::Invalid { .. } => {
                ComputeError::permanent("KUBERNETES_INVALID_REQUEST", CLASS, status)
            }
            KubeErrorKind::BadRequest => ComputeError::permanent(permanent_code, CLASS, status),
            KubeErrorKind::Throttled(after) => {
                ComputeError::deferred(THROTTLED, CLASS, after).with_reason("ClientThrottled")
            }
            KubeErrorKind::Decode => ComputeError::retryable("kubernetes_decode", status),
            KubeErrorKind::Cancelled(cancelled) => return ComputeError::cancelled(cancelled),
        };
        let error = error.with_request(self.diagnostic());
        let error = match &self.endpoint {
            Some(endpoint) => error.with_endpoint(endpoint),
            None => error,
        };
        match &self.reason {
            Some(reason) => error.with_reason(reason),
            None => error,
        }
    }
}

impl fmt::Display for KubeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kubernetes {} {}: ", self.method, self.path)?;
        match &self.kind {
            KubeErrorKind::Cancelled(c) => write!(f, "{c}")?,
            KubeErrorKind::Invalid { field: Some(field) } => write!(f, "invalid field {field}")?,
            kind => f.write_str(kind.as_str())?,
        }
        match (self.status, &self.reason, &self.endpoint) {
            (Some(status), Some(reason), _) => write!(f, " (status {status}, reason {reason})"),
            (Some(status), None, _) => write!(f, " (status {status})"),
            (None, Some(reason), Some(endpoint)) => write!(f, " ({reason} at {endpoint})"),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for KubeError {}

/// A transport failure, naming the API server's address and why it could not be reached
/// (`transport_cause`) so an operator can tell a refused port from a certificate or a name.
pub(super) fn transport_error(
    method: Method,
    path: &str,
    error: &ureq::Error,
    server: &str,
) -> KubeError {
    let decode = matches!(
        error,
        ureq::Error::BodyExceedsLimit(_)
            | ureq::Error::Protocol(_)
            | ureq::Error::LargeResponseHeader(..)
    );
    let kind = if decode {
        KubeErrorKind::Decode
    } else {
        KubeErrorKind::Transport
    };
    let mut e = KubeError::new(kind, method, path);
    if !decode {
        e.reason = Some(transport_cause(error).to_string());
        e.endpoint = Some(endpoint_of(server));
    }
    e
}

/// Why a request could not reach the API server, as one word: `ConnectionRefused`,
/// `ConnectionReset`, `DNSLookupFailed`, `TLSFailed`, `Timeout`, or `TransportFailed`.
fn transport_cause(error: &ureq::Error) -> &'static str {
    match error {
        ureq::Error::Timeout(_) => "Timeout",
        ureq::Error::HostNotFound => "DNSLookupFailed",
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) => "TLSFailed",
        ureq::Error::Io(e) => match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "ConnectionRefused",
            std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof => "ConnectionReset",
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => "Timeout",
            // rustls reports a refused certificate or handshake as invalid data.
            std::io::ErrorKind::InvalidData
                if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) =>
            {
                "TLSFailed"
            }
            _ => "TransportFailed",
        },
        _ => "TransportFailed",
    }
}

/// A short class of a transport failure for logs (no peer text).
pub(super) fn transport_class(error: &ureq::Error) -> &'static str {
    match error {
        ureq::Error::Timeout(_) => "timeout",
        ureq::Error::Io(_) => "io error",
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) => "tls error",
        ureq::Error::BodyExceedsLimit(_) => "body over limit",
        ureq::Error::Protocol(_) | ureq::Error::LargeResponseHeader(..) => "protocol error",
        _ => "transport error",
    }
}

/// The structured parts of a `Status` body; its `message` is never read.
#[derive(Deserialize)]
struct StatusBody {
    #[serde(default)]
    reason: Option<String>,
    /// Read only to tell a quota refusal from an authorization one (the API server says
    /// `exceeded quota` in it and nowhere else); never logged, stored or returned.
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    details: Option<StatusDetails>,
}

#[derive(Deserialize)]
struct StatusDetails {
    #[serde(default)]
    causes: Vec<StatusCause>,
}

#[derive(Deserialize)]
struct StatusCause {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    field: Option<String>,
}

fn parse_status(body: &[u8]) -> Option<StatusBody> {
    let value: Value = serde_json::from_slice(body).ok()?;
    if value.get("kind").and_then(Value::as_str) != Some("Status") {
        return None;
    }
    serde_json::from_value(value).ok()
}

/// The kind of an error answer from its HTTP status and `Status` body (only the structured
/// fields: reason, details.causes[].reason and .field).
pub fn classify(status: u16, body: &[u8]) -> KubeErrorKind {
    let parsed = parse_status(body);
    let reason = parsed.as_ref().and_then(|s| s.reason.as_deref());
    let causes = parsed
        .as_ref()
        .and_then(|s| s.details.as_ref())
        .map(|d| d.causes.as_slice())
        .unwrap_or_default();
    match status {
        400 => KubeErrorKind::BadRequest,
        401 => KubeErrorKind::Unauthorized,
        403 => {
            let terminating = reason == Some("NamespaceTerminating")
                || causes
                    .iter()
                    .any(|c| c.reason.as_deref() == Some("NamespaceTerminating"));
            let quota = parsed
                .as_ref()
                .and_then(|s| s.message.as_deref())
                .is_some_and(|m| m.contains("exceeded quota"));
            if terminating {
                KubeErrorKind::NamespaceTerminating
            } else if quota {
                KubeErrorKind::QuotaExceeded
            } else {
                KubeErrorKind::Forbidden
            }
        }
        404 => KubeErrorKind::NotFound,
        409 if reason == Some("AlreadyExists") => KubeErrorKind::AlreadyExists,
        409 => KubeErrorKind::Conflict,
        422 => KubeErrorKind::Invalid {
            field: causes
                .iter()
                .find_map(|c| c.field.as_deref())
                .map(bounded_field),
        },
        429 => KubeErrorKind::TooManyRequests,
        500..=599 => KubeErrorKind::Unavailable,
        _ => KubeErrorKind::Other,
    }
}

/// A reason bounded to a code-like token.
fn bounded(reason: &str) -> String {
    reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(64)
        .collect()
}

/// A field path bounded to path characters.
fn bounded_field(field: &str) -> String {
    field
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-[]/".contains(*c))
        .take(128)
        .collect()
}
