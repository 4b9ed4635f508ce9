//! The native repository sender's client (SPEC G20, G21): four calls, `open`, `close`,
//! `status` and `ready`, each a `POST <url>/<call>` with a JSON body over HTTPS verified
//! against the sender's CA only (no proxy, no redirect), bounded by its `timeoutSeconds`
//! (`ready`: 2 000 ms, SPEC G7) and interrupted by the pass's cancellation.
//!
//! Every answer is validated field by field; anything that is not the call's answer is no
//! answer (`REPOSITORY_SENDER_UNAVAILABLE`). Logs and errors carry the call, a class and an
//! HTTP status, never a request's or an answer's text.

use crate::cancel::{CancelToken, Cancelled};
use crate::compute::abortable::webhook_agent;
use crate::compute::kubernetes::names::is_dns_label;
use crate::compute::{is_code, ComputeError};
use crate::installation::RepositorySenderEntry;
use serde_json::{json, Map, Value};
use std::fmt;
use std::time::Duration;

/// No valid answer from the sender (SPEC G21): a retry in preparation, a cleanup's cause.
pub const REPOSITORY_SENDER_UNAVAILABLE: &str = "REPOSITORY_SENDER_UNAVAILABLE";
/// `opened: false` without a code of the sender's own (SPEC G21).
pub const REPOSITORY_SESSION_REFUSED: &str = "REPOSITORY_SESSION_REFUSED";
/// The largest answer read, and the largest request sent (SPEC G20).
const BODY_LIMIT: usize = 64 * 1024;
/// `ready`'s bound (SPEC G7).
pub const READY_TIMEOUT: Duration = Duration::from_millis(2_000);

/// The selected sender's client, built once at start-up (SPEC G6).
pub struct RepositorySender {
    id: String,
    installation_id: String,
    /// The configured URL without a trailing `/`; a call goes to `<base>/<call>`.
    base: String,
    timeout: Duration,
    cleanup_interval: Duration,
    durable_broker_receipts: bool,
    agent: ureq::Agent,
}

impl fmt::Debug for RepositorySender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RepositorySender")
            .field("id", &self.id)
            .field("url", &self.base)
            .finish_non_exhaustive()
    }
}

/// `open`'s request (SPEC G20), less `installationId` and `senderId`.
#[derive(Clone, Copy, Debug)]
pub struct OpenRequest<'a> {
    pub namespace_id: &'a str,
    pub agent_id: &'a str,
    pub revision_id: &'a str,
    /// The session row's `admission_id`: the idempotency key of every call about it.
    pub admission_id: &'a str,
    pub repository_ref: &'a str,
    /// `read` or `write`.
    pub scope: &'a str,
    /// The Kubernetes namespace the material Secret is in (the driver's `runtime_namespace`).
    pub kubernetes_namespace: &'a str,
    /// The revision's `deadlineAt`, when it has one (RFC 3339).
    pub deadline_at: Option<&'a str>,
    pub standing: bool,
}

/// `close`'s and `status`'s request (SPEC G20), less `installationId` and `senderId`.
#[derive(Clone, Copy, Debug)]
pub struct SessionRequest<'a> {
    pub namespace_id: &'a str,
    pub admission_id: &'a str,
    pub session_id: Option<&'a str>,
}

/// Where a session's Git credential is: a key of a Secret in the runtime's Kubernetes
/// namespace. Names only, never a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Material {
    pub name: String,
    pub key: String,
}

/// A valid `open` answer (SPEC G20, G21).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenAnswer {
    Opened {
        session_id: String,
        material: Material,
    },
    /// `opened: false`: the sender's code when it is one, else `REPOSITORY_SESSION_REFUSED`.
    /// Permanent (a G10 refusal).
    Refused { code: String },
}

/// A valid `status` answer (SPEC G20).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionState {
    Open,
    Closed,
    /// The sender cannot confirm disposal.
    Unknown,
}

/// A call that got no valid answer (SPEC G21), or a cancelled pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SenderError {
    Cancelled(Cancelled),
    Unavailable {
        call: &'static str,
        /// `repository_sender_timeout`, `_tls`, `_transport`, `_status`, `_answer` or
        /// `_request`.
        class: &'static str,
        status: Option<u16>,
    },
}

impl SenderError {
    /// `REPOSITORY_SENDER_UNAVAILABLE`, or the loss cause's code of a cancelled pass.
    pub fn code(&self) -> &'static str {
        match self {
            SenderError::Cancelled(cancelled) => cancelled.0.code(),
            SenderError::Unavailable { .. } => REPOSITORY_SENDER_UNAVAILABLE,
        }
    }
}

impl fmt::Display for SenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SenderError::Cancelled(cancelled) => fmt::Display::fmt(cancelled, f),
            SenderError::Unavailable {
                call,
                class,
                status,
            } => {
                write!(f, "{REPOSITORY_SENDER_UNAVAILABLE} ({call}: {class}")?;
                if let Some(status) = status {
                    write!(f, ", HTTP {status}")?;
                }
                f.write_str(")")
            }
        }
    }
}

impl std::error::Error for SenderError {}

impl From<Cancelled> for SenderError {
    fn from(cancelled: Cancelled) -> SenderError {
        SenderError::Cancelled(cancelled)
    }
}

/// No answer is a retry that keeps `REPOSITORY_SENDER_UNAVAILABLE` (SPEC G21), its class the
/// transport's and its reason the call; a cancelled pass stays cancelled.
impl From<SenderError> for ComputeError {
    fn from(error: SenderError) -> ComputeError {
        match error {
            SenderError::Cancelled(cancelled) => ComputeError::cancelled(cancelled),
            SenderError::Unavailable {
                call,
                class,
                status,
            } => ComputeError::retryable(class, status)
                .with_retry_code(REPOSITORY_SENDER_UNAVAILABLE)
                .with_reason(call),
        }
    }
}

impl RepositorySender {
    /// The client of `entry` (validated by `installation`) for the Installation
    /// `installation_id`. A CA bundle that holds no certificate is an error naming the key.
    pub fn new(
        entry: &RepositorySenderEntry,
        installation_id: &str,
    ) -> Result<RepositorySender, String> {
        let Some(agent) = webhook_agent(&entry.ca_pem) else {
            return Err(format!(
                "repositorySender.caFile {} holds no PEM certificate",
                entry.ca_file.display()
            ));
        };
        Ok(RepositorySender {
            id: entry.id.clone(),
            installation_id: installation_id.to_string(),
            base: entry.url.trim_end_matches('/').to_string(),
            timeout: entry.timeout,
            cleanup_interval: entry.cleanup_interval,
            durable_broker_receipts: entry.durable_broker_receipts,
            agent,
        })
    }

    /// The sender's id: the `senderId` of every request and of a revision's snapshot.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The cleanup interval (SPEC G4, G6).
    pub fn cleanup_interval(&self) -> Duration {
        self.cleanup_interval
    }

    /// Whether each health beat asks `ready` first (SPEC G7).
    pub fn durable_broker_receipts(&self) -> bool {
        self.durable_broker_receipts
    }

    /// `open` (SPEC G20): a session for one binding. Repeated with the same `admission_id`,
    /// the sender answers the same session.
    pub fn open(
        &self,
        req: &OpenRequest<'_>,
        cancel: &CancelToken,
    ) -> Result<OpenAnswer, SenderError> {
        let mut body = json!({
            "namespaceId": req.namespace_id,
            "agentId": req.agent_id,
            "revisionId": req.revision_id,
            "admissionId": req.admission_id,
            "repositoryRef": req.repository_ref,
            "scope": req.scope,
            "kubernetesNamespace": req.kubernetes_namespace,
            "standing": req.standing,
        });
        if let Some(deadline) = req.deadline_at {
            body["deadlineAt"] = json!(deadline);
        }
        let answer = self.call("open", body, self.timeout, cancel)?;
        open_answer(&answer)
            .ok_or_else(|| self.no_answer("open", "repository_sender_answer", Some(200)))
    }

    /// `close` (SPEC G20): whether the sender answered `closed: true`.
    pub fn close(
        &self,
        req: &SessionRequest<'_>,
        cancel: &CancelToken,
    ) -> Result<bool, SenderError> {
        let answer = self.call("close", session_body(req), self.timeout, cancel)?;
        answer
            .get("closed")
            .and_then(Value::as_bool)
            .ok_or_else(|| self.no_answer("close", "repository_sender_answer", Some(200)))
    }

    /// `status` (SPEC G20): what the sender knows of the session.
    pub fn status(
        &self,
        req: &SessionRequest<'_>,
        cancel: &CancelToken,
    ) -> Result<SessionState, SenderError> {
        let answer = self.call("status", session_body(req), self.timeout, cancel)?;
        match answer.get("state").and_then(Value::as_str) {
            Some("open") => Ok(SessionState::Open),
            Some("closed") => Ok(SessionState::Closed),
            Some("unknown") => Ok(SessionState::Unknown),
            _ => Err(self.no_answer("status", "repository_sender_answer", Some(200))),
        }
    }

    /// `ready` (SPEC G7), bounded by 2 000 ms and by nothing else: the health beat's question.
    pub fn ready(&self) -> Result<bool, SenderError> {
        let answer = self.call("ready", json!({}), READY_TIMEOUT, &CancelToken::unbounded())?;
        answer
            .get("ready")
            .and_then(Value::as_bool)
            .ok_or_else(|| self.no_answer("ready", "repository_sender_answer", Some(200)))
    }

    /// One call: a cancellation point, then `POST <url>/<call>` with `body` and the two ids
    /// every request carries; the answer when it is `200` with a JSON object of at most 64 KiB.
    fn call(
        &self,
        call: &'static str,
        mut body: Value,
        timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<Map<String, Value>, SenderError> {
        cancel.check()?;
        body["installationId"] = json!(self.installation_id);
        body["senderId"] = json!(self.id);
        let body = body.to_string();
        if body.len() > BODY_LIMIT {
            return Err(self.no_answer(call, "repository_sender_request", None));
        }
        let (status, answer) = self.post(call, body, timeout, cancel)?;
        if status != 200 {
            return Err(self.no_answer(call, "repository_sender_status", Some(status)));
        }
        match serde_json::from_slice(&answer) {
            Ok(Value::Object(answer)) => Ok(answer),
            _ => Err(self.no_answer(call, "repository_sender_answer", Some(200))),
        }
    }

    /// Sends `body`, bounded by `timeout` and interrupted when `cancel` is: the answer's status
    /// and body (at most 64 KiB).
    fn post(
        &self,
        call: &'static str,
        body: String,
        timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<(u16, Vec<u8>), SenderError> {
        let _current = cancel.enter();
        let request = ureq::http::Request::post(format!("{}/{call}", self.base))
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(body)
            .map_err(|_| self.no_answer(call, "repository_sender_request", None))?;
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(Some(timeout))
            .build();
        self.agent
            .run(request)
            .and_then(|mut response| {
                let status = response.status().as_u16();
                let body = response
                    .body_mut()
                    .with_config()
                    .limit(BODY_LIMIT as u64)
                    .read_to_vec()?;
                Ok((status, body))
            })
            .map_err(|e| match cancel.check() {
                Err(cancelled) => SenderError::Cancelled(cancelled),
                Ok(()) => self.no_answer(call, transport_class(&e), None),
            })
    }

    /// No valid answer, logged with the call, class and status only (SPEC G21).
    fn no_answer(
        &self,
        call: &'static str,
        class: &'static str,
        status: Option<u16>,
    ) -> SenderError {
        match status {
            Some(status) => log::warn!(
                "repository sender {}: {call} got no valid answer ({class}, HTTP {status})",
                self.id
            ),
            None => log::warn!(
                "repository sender {}: {call} got no valid answer ({class})",
                self.id
            ),
        }
        SenderError::Unavailable {
            call,
            class,
            status,
        }
    }
}

fn session_body(req: &SessionRequest<'_>) -> Value {
    let mut body = json!({
        "namespaceId": req.namespace_id,
        "admissionId": req.admission_id,
    });
    if let Some(session) = req.session_id {
        body["sessionId"] = json!(session);
    }
    body
}

/// `open`'s answer, field by field, or `None` when it is not one (SPEC G20, G21).
fn open_answer(answer: &Map<String, Value>) -> Option<OpenAnswer> {
    match answer.get("opened")?.as_bool()? {
        false => {
            let code = answer
                .get("code")
                .and_then(Value::as_str)
                .filter(|c| is_code(c))
                .unwrap_or(REPOSITORY_SESSION_REFUSED);
            Some(OpenAnswer::Refused { code: code.into() })
        }
        true => {
            let session_id = answer.get("sessionId")?.as_str()?;
            let material = answer.get("material")?.as_object()?;
            let name = material.get("name")?.as_str()?;
            let key = material.get("key")?.as_str()?;
            (is_session_id(session_id) && is_subdomain(name) && is_secret_key(key)).then(|| {
                OpenAnswer::Opened {
                    session_id: session_id.into(),
                    material: Material {
                        name: name.into(),
                        key: key.into(),
                    },
                }
            })
        }
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$` (SPEC G20).
pub fn is_session_id(s: &str) -> bool {
    s.len() <= 128
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}

/// A DNS-1123 subdomain: a Kubernetes object name (SPEC G20).
pub fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A Secret's data key, `^[-._a-zA-Z0-9]{1,253}$` (SPEC G20).
pub fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// A short class of a transport failure (no peer text).
fn transport_class(error: &ureq::Error) -> &'static str {
    match error {
        ureq::Error::Timeout(_) => "repository_sender_timeout",
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) => {
            "repository_sender_tls"
        }
        // A refused certificate comes back as the handshake's I/O error around rustls's.
        ureq::Error::Io(e) if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) => {
            "repository_sender_tls"
        }
        ureq::Error::BodyExceedsLimit(_) => "repository_sender_answer",
        _ => "repository_sender_transport",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g20_names_follow_their_patterns() {
        assert!(is_session_id("s-1"));
        assert!(is_session_id(&format!("a{}", "b".repeat(127))));
        for bad in ["", "-s", "s/1", "s 1", &format!("a{}", "b".repeat(128))] {
            assert!(!is_session_id(bad), "{bad}");
        }
        assert!(is_subdomain("git-token.acme"));
        for bad in ["", "Git", "a..b", "-a", "a_b", &"a".repeat(254)] {
            assert!(!is_subdomain(bad), "{bad}");
        }
        assert!(is_secret_key("token"));
        assert!(is_secret_key(".git-credentials"));
        for bad in ["", "a/b", "a b", &"k".repeat(254)] {
            assert!(!is_secret_key(bad), "{bad}");
        }
    }

    #[test]
    fn g21_a_refusal_keeps_a_codes_shape_or_becomes_the_generic_code() {
        let refused = |answer: Value| open_answer(answer.as_object().unwrap());
        assert_eq!(
            refused(json!({"opened": false, "code": "TEAM_FROZEN"})),
            Some(OpenAnswer::Refused {
                code: "TEAM_FROZEN".into()
            })
        );
        for code in [json!("not a code"), json!(7), Value::Null] {
            assert_eq!(
                refused(json!({"opened": false, "code": code})),
                Some(OpenAnswer::Refused {
                    code: REPOSITORY_SESSION_REFUSED.into()
                })
            );
        }
        assert_eq!(refused(json!({"opened": "false"})), None);
    }
}
