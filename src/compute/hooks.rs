//! Lifecycle hooks as webhooks (SPEC §14): the calls a Compute Driver makes to the
//! Installation's Configuration, Sandbox and IAM drivers at four points of its work.
//!
//! This module owns the HTTPS client of each hook (its own CA, no proxy, no redirect, bounded by
//! the hook's `timeoutSeconds` and interrupted by the pass's cancellation), the request and
//! answer shapes, the H4 outcomes as `ComputeError`s and the H5 rules on launch values. The
//! drivers decide when to call (H3). It never logs: an error carries the hook's driver name,
//! a class and an HTTP status, never the hook's text or a launch value.

use super::abortable::webhook_agent;
use super::error::ComputeError;
use super::observation::is_code;
use crate::cancel::CancelToken;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A refusal of a workload start's launch values (H5), permanent.
pub const LAUNCH_VALUE_REFUSED: &str = "LIFECYCLE_LAUNCH_VALUE_REFUSED";
/// A hook refused without a code of its own (H4).
pub const HOOK_REFUSED: &str = "LIFECYCLE_HOOK_REFUSED";
/// A hook gave no valid answer (H4).
pub const HOOK_UNAVAILABLE: &str = "LIFECYCLE_HOOK_UNAVAILABLE";
/// The largest answer read from a hook.
const ANSWER_LIMIT: u64 = 64 * 1024;
/// The longest launch value (H5).
const LAUNCH_VALUE_MAX_CHARS: usize = 256;

/// The configured hooks, each with its client, in H2 order. A driver is built with them
/// (`LifecycleHooks::default()`: none, every phase passes with no launch values).
#[derive(Default)]
pub struct LifecycleHooks {
    hooks: Vec<Hook>,
}

struct Hook {
    driver: HookDriver,
    url: String,
    phases: Vec<Phase>,
    timeout: Duration,
    agent: ureq::Agent,
}

impl fmt::Debug for LifecycleHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.hooks.iter().map(|h| (h.driver.as_str(), &h.url)))
            .finish()
    }
}

/// What a hook is asked about (H3's request, less the phase).
#[derive(Clone, Copy, Debug)]
pub struct HookSubject<'a> {
    pub installation_id: &'a str,
    pub namespace_id: &'a str,
    pub agent_id: Option<&'a str>,
    pub revision_id: Option<&'a str>,
    pub compute_driver_id: &'a str,
}

/// Launch values the `beforeWorkloadStart` hooks answered (H5), in the hooks' order. Its
/// `Debug` names the variables only: a value never reaches a log.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct LaunchValues(Vec<(String, String)>);

impl LaunchValues {
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for LaunchValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
}

/// The Installation driver a hook belongs to; the order of the variants is H2's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookDriver {
    Configuration,
    Sandbox,
    Iam,
}

impl HookDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            HookDriver::Configuration => "configuration",
            HookDriver::Sandbox => "sandbox",
            HookDriver::Iam => "iam",
        }
    }
}

/// The four points of Compute's work a hook may run at (SPEC H3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    AfterNamespacePrepared,
    BeforeWorkloadStart,
    BeforeWorkloadStop,
    BeforeNamespaceDelete,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::AfterNamespacePrepared => "afterNamespacePrepared",
            Phase::BeforeWorkloadStart => "beforeWorkloadStart",
            Phase::BeforeWorkloadStop => "beforeWorkloadStop",
            Phase::BeforeNamespaceDelete => "beforeNamespaceDelete",
        }
    }
}

/// One validated `lifecycleHooks` entry (SPEC H1).
#[derive(Clone, Debug, PartialEq)]
pub struct HookEntry {
    pub driver: HookDriver,
    /// An `https://` URL.
    pub url: String,
    /// The PEM bundle the hook's certificate is verified against.
    pub ca_file: PathBuf,
    /// The certificates read from `ca_file` at start-up, in PEM.
    pub ca_pem: Vec<u8>,
    pub phases: Vec<Phase>,
    pub timeout: Duration,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    allowed: bool,
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    launch_values: Option<Map<String, Value>>,
}

impl LifecycleHooks {
    /// Clients for `entries` (validated by `installation`, in H2 order). An entry's CA bundle
    /// that holds no certificate is an error naming the driver.
    pub fn new(entries: &[HookEntry]) -> Result<LifecycleHooks, String> {
        let hooks = entries
            .iter()
            .map(|entry| {
                let Some(agent) = webhook_agent(&entry.ca_pem) else {
                    return Err(format!(
                        "lifecycle hook {}: caFile holds no PEM certificate",
                        entry.driver.as_str()
                    ));
                };
                Ok(Hook {
                    driver: entry.driver,
                    url: entry.url.clone(),
                    phases: entry.phases.clone(),
                    timeout: entry.timeout,
                    agent,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(LifecycleHooks { hooks })
    }

    /// Whether any hook is subscribed to `phase`.
    pub fn subscribed(&self, phase: Phase) -> bool {
        self.hooks.iter().any(|h| h.phases.contains(&phase))
    }

    /// Calls every hook subscribed to `phase`, in order, and stops at the first that does not
    /// allow (H3, H4). At `beforeWorkloadStart` it returns the launch values the hooks
    /// answered, each checked against H5 with `taken` (the names the workload already sets)
    /// and the names earlier hooks gave; elsewhere launch values are ignored.
    pub fn run(
        &self,
        phase: Phase,
        subject: &HookSubject<'_>,
        taken: &[&str],
        cancel: &CancelToken,
    ) -> Result<LaunchValues, ComputeError> {
        let mut values = LaunchValues::default();
        for hook in self.hooks.iter().filter(|h| h.phases.contains(&phase)) {
            let answer = hook.call(phase, subject, cancel)?;
            if !answer.allowed {
                return Err(refused(phase, hook.driver, answer.code.as_ref()));
            }
            if phase == Phase::BeforeWorkloadStart {
                for (name, value) in answer.launch_values.unwrap_or_default() {
                    let fresh = !taken.contains(&name.as_str())
                        && !values.0.iter().any(|(n, _)| *n == name);
                    match value.as_str() {
                        Some(value) if fresh && launch_name(&name) && launch_value(value) => {
                            values.0.push((name, value.to_string()))
                        }
                        _ => {
                            return Err(ComputeError::permanent(
                                LAUNCH_VALUE_REFUSED,
                                "lifecycle_hook",
                                None,
                            )
                            .with_reason(hook.driver.as_str()))
                        }
                    }
                }
            }
        }
        Ok(values)
    }
}

impl Hook {
    /// One call: a cancellation point, bounded by the hook's timeout and interrupted when
    /// `cancel` is. Any answer but `200` with the answer's shape is no answer.
    fn call(
        &self,
        phase: Phase,
        subject: &HookSubject<'_>,
        cancel: &CancelToken,
    ) -> Result<Answer, ComputeError> {
        cancel.check()?;
        let mut body = json!({
            "phase": phase.as_str(),
            "installationId": subject.installation_id,
            "namespaceId": subject.namespace_id,
            "computeDriverId": subject.compute_driver_id,
        });
        if let Some(agent) = subject.agent_id {
            body["agentId"] = json!(agent);
        }
        if let Some(revision) = subject.revision_id {
            body["revisionId"] = json!(revision);
        }
        let unavailable = |status: Option<u16>, class: &'static str| {
            unavailable(phase, self.driver, status, class)
        };
        let (status, body) = self.post(&body, cancel).map_err(|e| match e {
            Sent::Cancelled(cancelled) => ComputeError::cancelled(cancelled),
            Sent::NoAnswer(class) => unavailable(None, class),
        })?;
        if status != 200 {
            return Err(unavailable(Some(status), "lifecycle_hook_status"));
        }
        serde_json::from_slice(&body).map_err(|_| unavailable(Some(200), "lifecycle_hook_answer"))
    }

    /// Sends `body`, bounded by the hook's timeout and interrupted when `cancel` is: the
    /// answer's status and body (at most `ANSWER_LIMIT` bytes).
    fn post(&self, body: &Value, cancel: &CancelToken) -> Result<(u16, Vec<u8>), Sent> {
        let _current = cancel.enter();
        let request = ureq::http::Request::post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(body.to_string())
            .map_err(|_| Sent::NoAnswer("lifecycle_hook_request"))?;
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(Some(self.timeout))
            .build();
        self.agent
            .run(request)
            .and_then(|mut response| {
                let status = response.status().as_u16();
                let body = response
                    .body_mut()
                    .with_config()
                    .limit(ANSWER_LIMIT)
                    .read_to_vec()?;
                Ok((status, body))
            })
            .map_err(|e| match cancel.check() {
                Err(cancelled) => Sent::Cancelled(cancelled),
                Ok(()) => Sent::NoAnswer(transport_class(&e)),
            })
    }
}

/// Why a request got no answer: the pass was cancelled, or a class of transport failure.
enum Sent {
    Cancelled(crate::cancel::Cancelled),
    NoAnswer(&'static str),
}

/// What `occ-worker check` found of one hook: its driver and URL and, when it gave no valid
/// answer, why, in an operator's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookCheck {
    pub driver: HookDriver,
    pub url: String,
    pub problem: Option<String>,
}

/// The phase of `check`'s call: none of H3's, so a hook guards nothing on it (the reference
/// hook, like any that allows a phase it does not name, allows it).
pub const CHECK_PHASE: &str = "check";

impl LifecycleHooks {
    /// Calls each hook once, in H2 order, with the phase `check` and no Namespace: whether it
    /// answers `200` with an answer's shape over TLS its CA verifies, within its timeout. The
    /// answer's `allowed` does not matter.
    pub fn check(&self, installation_id: &str, compute_driver_id: &str) -> Vec<HookCheck> {
        let body = json!({
            "phase": CHECK_PHASE,
            "installationId": installation_id,
            "computeDriverId": compute_driver_id,
        });
        let cancel = CancelToken::unbounded();
        self.hooks
            .iter()
            .map(|hook| {
                let problem = match hook.post(&body, &cancel) {
                    Ok((200, answer)) => serde_json::from_slice::<Answer>(&answer)
                        .err()
                        .map(|_| "answered 200 without an answer ({\"allowed\": bool, …})".into()),
                    Ok((status, _)) => Some(format!("answered HTTP {status}, not 200")),
                    Err(Sent::Cancelled(_)) => Some("was not called (cancelled)".into()),
                    Err(Sent::NoAnswer(class)) => Some(match class {
                        "lifecycle_hook_timeout" => format!(
                            "did not answer within its timeout ({} s)",
                            hook.timeout.as_secs()
                        ),
                        "lifecycle_hook_tls" => {
                            "refused TLS: its certificate is not one caFile verifies".into()
                        }
                        _ => "could not be reached (the connection failed)".into(),
                    }),
                };
                HookCheck {
                    driver: hook.driver,
                    url: hook.url.clone(),
                    problem,
                }
            })
            .collect()
    }
}

/// No valid answer (H4): a retry that keeps `LIFECYCLE_HOOK_UNAVAILABLE`. Before a workload
/// starts it waits like any unavailable dependency of a deployment (R10); at the other phases
/// it spends an attempt.
fn unavailable(
    phase: Phase,
    driver: HookDriver,
    status: Option<u16>,
    class: &'static str,
) -> ComputeError {
    let error = if phase == Phase::BeforeWorkloadStart {
        ComputeError::transient(class, status)
    } else {
        ComputeError::retryable(class, status)
    };
    error
        .with_retry_code(HOOK_UNAVAILABLE)
        .with_reason(driver.as_str())
}

/// `allowed: false` (H4): the hook's code when it is one, else `LIFECYCLE_HOOK_REFUSED`;
/// permanent before a workload starts, a retry with that code elsewhere.
fn refused(phase: Phase, driver: HookDriver, code: Option<&Value>) -> ComputeError {
    let code = code
        .and_then(Value::as_str)
        .filter(|c| is_code(c))
        .unwrap_or(HOOK_REFUSED);
    let error = if phase == Phase::BeforeWorkloadStart {
        ComputeError::permanent(code, "lifecycle_hook", None)
    } else {
        ComputeError::retryable("lifecycle_hook", None).with_retry_code(code)
    };
    error.with_reason(driver.as_str())
}

/// A launch value's name (H5): a code-like token that is not the driver's own `OCC_` space.
fn launch_name(name: &str) -> bool {
    is_code(name) && !name.starts_with("OCC_")
}

/// A launch value (H5): an `opaque-` placeholder of at most 256 printable characters.
fn launch_value(value: &str) -> bool {
    value.starts_with("opaque-")
        && value.chars().count() <= LAUNCH_VALUE_MAX_CHARS
        && value.chars().all(|c| (' '..='~').contains(&c))
}

/// A short class of a transport failure (no peer text).
fn transport_class(error: &ureq::Error) -> &'static str {
    match error {
        ureq::Error::Timeout(_) => "lifecycle_hook_timeout",
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) => "lifecycle_hook_tls",
        // A refused certificate comes back as the handshake's I/O error around rustls's.
        ureq::Error::Io(e) if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) => {
            "lifecycle_hook_tls"
        }
        ureq::Error::BodyExceedsLimit(_) => "lifecycle_hook_answer",
        _ => "lifecycle_hook_transport",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_names_and_values_follow_h5() {
        assert!(launch_name("MODEL_ROUTE"));
        assert!(launch_name("A"));
        for bad in ["", "model", "OCC_TOKEN", "1A", "A-B", &"A".repeat(65)] {
            assert!(!launch_name(bad), "{bad}");
        }
        assert!(launch_value("opaque-1"));
        assert!(launch_value(&format!("opaque-{}", "x".repeat(249))));
        for bad in [
            "sk-live-1",
            "opaque",
            "Opaque-1",
            "opaque-\n",
            "opaque-é",
            &format!("opaque-{}", "x".repeat(250)),
        ] {
            assert!(!launch_value(bad), "{bad}");
        }
    }

    #[test]
    fn refusals_keep_a_codes_shape_or_become_the_generic_code() {
        // SPEC H4.
        let start = refused(
            Phase::BeforeWorkloadStart,
            HookDriver::Iam,
            Some(&json!("TEAM_FROZEN")),
        );
        assert_eq!(
            start.kind(),
            &super::super::error::ComputeErrorKind::Permanent("TEAM_FROZEN".into())
        );
        assert_eq!(start.reason(), Some("iam"));
        let stop = refused(
            Phase::BeforeWorkloadStop,
            HookDriver::Sandbox,
            Some(&json!("not a code")),
        );
        assert_eq!(
            stop.kind(),
            &super::super::error::ComputeErrorKind::Retryable
        );
        assert_eq!(stop.retry_code(), HOOK_REFUSED);
        let unanswered = unavailable(Phase::BeforeWorkloadStart, HookDriver::Iam, None, "x");
        assert!(unanswered.is_transient());
        assert_eq!(unanswered.retry_code(), HOOK_UNAVAILABLE);
    }

    #[test]
    fn launch_values_never_show_in_debug() {
        let values = LaunchValues(vec![("MODEL".into(), "opaque-secretish".into())]);
        assert_eq!(format!("{values:?}"), r#"["MODEL"]"#);
    }
}
