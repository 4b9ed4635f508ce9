//! The Kubernetes REST client: one blocking HTTPS request at a time per caller, shared by the
//! worker threads.
//!
//! This module owns the request layer of the Kubernetes driver: TLS verified against the
//! configured CA only (no insecure switch, no proxy, no redirects), bearer tokens (a token file
//! is re-read at least every minute and at once after a 401, since kubelets rotate projected
//! tokens; an exec plugin's token is replaced shortly before it expires and after a 401), the per-request cancellation point and timeout (the request timeout, while the
//! heartbeat renews the claim; a lost claim shuts the socket down: `compute::abortable`), the
//! response body limit, 429 back-off honouring `Retry-After`, and the mapping of `Status`
//! bodies to a typed `KubeError` (`classify`) and of that to `ComputeError` (`into_compute`).
//! Each call has one budget, the request timeout, counted from when it starts (`Budget`):
//! the rate limiter's wait, an exec plugin's token refresh, the 401 and 429 retries and their
//! `Retry-After` sleeps all spend it, and a retry that no longer fits is not sent.
//! `get_raw` reads an answer that is not a Kubernetes object (a Pod's own endpoint through
//! the API server's proxy) within the same budget, with its own body limit.
//! It must never outlive the claim, never follow a redirect, and never log or return the
//! API's message text, a body or a token: errors and log lines carry the method, a path
//! template, the HTTP status, the one-word Status reason and, for 422, the field name. The
//! one body it returns is `get_raw`'s, to a caller that keeps a bounded code of it or nothing.

pub mod error;

use super::connection::{read_token, Auth, Connection};
use super::connection_error::ConnectionError;
use super::exec::{self, ExecConfig, ExecToken};
use crate::cancel::CancelToken;
use crate::compute::abortable::AbortableConnector;
use crate::compute::DEFAULT_REQUEST_TIMEOUT;
use error::{transport_class, transport_error, KubeError, KubeErrorKind};
use parking_lot::Mutex;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use ureq::tls::{ClientCert, RootCerts, TlsConfig, TlsProvider};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{Connector, RustlsConnector, TcpConnector};

/// The largest response body read.
pub const BODY_LIMIT: u64 = 16 * 1024 * 1024;
/// How long a token read from a file is used before it is read again.
pub const TOKEN_REFRESH: Duration = Duration::from_secs(60);
/// How many times one request is retried after a 429.
pub const MAX_THROTTLE_RETRIES: u32 = 3;
/// The client-side rate limit unless the driver file sets `qps` and `burst`.
pub const DEFAULT_QPS: f64 = 20.0;
pub const DEFAULT_BURST: u32 = 40;
/// Items asked for per page of a list.
const LIST_PAGE_SIZE: &str = "500";
/// Pages read for one list before giving up (500 000 items).
const MAX_LIST_PAGES: usize = 1000;

/// A blocking Kubernetes API client; `Send + Sync`, shared by the worker threads.
pub struct Client {
    server: String,
    agent: ureq::Agent,
    /// Every request of this process waits for a token here first.
    limiter: RateLimiter,
    /// The upper bound of one request; a lost claim ends it sooner.
    request_timeout: Duration,
    token: TokenSource,
    requests: AtomicU64,
}

/// About the requests one Agent pass makes (a deployment's prepare and activate, a deletion's
/// retirement): what `passes_within_rate_limit` counts a pass at.
pub const PASS_REQUESTS: u32 = 10;

/// A token bucket shared by every thread of the process (client-go's `tokenBucketRateLimiter`):
/// `burst` tokens at most, refilled at `qps` a second. A request takes a token, waiting for it
/// when there is none; the wait is reserved at once, so concurrent callers queue in order and
/// never wake together.
#[derive(Debug)]
struct RateLimiter {
    qps: f64,
    burst: f64,
    /// (tokens available, possibly negative once waits are reserved; when they were counted).
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    fn new(qps: f64, burst: u32) -> RateLimiter {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token at `now` and returns how long the caller must wait before it sends.
    #[cfg(test)]
    fn reserve(&self, now: Instant) -> Duration {
        self.reserve_within(now, Duration::MAX)
            .expect("every wait fits an unbounded budget")
    }

    /// The tokens available at `now` (negative while waits are reserved past them).
    fn available(&self, now: Instant) -> f64 {
        let (tokens, counted) = *self.state.lock();
        (tokens + now.saturating_duration_since(counted).as_secs_f64() * self.qps).min(self.burst)
    }

    /// Takes a token at `now` when the wait for it is shorter than `budget`, and returns that
    /// wait; `Err` with the wait it would have been, taking nothing, when it is not.
    fn reserve_within(&self, now: Instant, budget: Duration) -> Result<Duration, Duration> {
        let mut state = self.state.lock();
        let (tokens, counted) = *state;
        let refilled = (tokens + now.saturating_duration_since(counted).as_secs_f64() * self.qps)
            .min(self.burst);
        let left = refilled - 1.0;
        let wait = if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.qps)
        };
        if !wait.is_zero() && wait >= budget {
            return Err(wait);
        }
        *state = (left, now.max(counted));
        Ok(wait)
    }
}

/// Where the bearer token comes from.
enum TokenSource {
    None,
    Static(String),
    File {
        path: PathBuf,
        cached: Mutex<CachedToken>,
        refresh_every: Duration,
    },
    /// An exec credential plugin's token, run again shortly before it expires and after a 401.
    Exec {
        config: ExecConfig,
        base: PathBuf,
        cached: Mutex<Option<ExecToken>>,
    },
}

/// How long before its expiry an exec plugin's token is replaced.
const EXEC_EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// Runs the plugin again within `budget` (and `EXEC_TIMEOUT`), keeping the last token when it
/// fails (logged by command and how it failed, never its output nor what it wrote on stderr:
/// SPEC W7; `occ-worker check` shows that hint).
fn rerun(
    config: &ExecConfig,
    base: &std::path::Path,
    cached: &mut Option<ExecToken>,
    budget: Duration,
) {
    match exec::run(config, base, budget.min(exec::EXEC_TIMEOUT)) {
        Ok(token) => *cached = Some(token),
        Err(e) => log::warn!(
            "kubernetes exec plugin: {}; keeping the last token",
            e.logged()
        ),
    }
}

struct CachedToken {
    token: String,
    read_at: Instant,
}

impl TokenSource {
    /// The token to send: a file's is re-read once `refresh_every` has passed; when that read
    /// fails the last good token is kept and the read is tried again after the same interval.
    /// An exec plugin run for it is bounded by `budget`.
    fn current(&self, budget: Duration) -> Option<String> {
        match self {
            TokenSource::None => None,
            TokenSource::Static(token) => Some(token.clone()),
            TokenSource::File {
                path,
                cached,
                refresh_every,
            } => {
                let mut cached = cached.lock();
                if cached.read_at.elapsed() >= *refresh_every {
                    reload(path, &mut cached);
                }
                Some(cached.token.clone())
            }
            TokenSource::Exec {
                config,
                base,
                cached,
            } => {
                let mut cached = cached.lock();
                let stale = cached.as_ref().is_none_or(|t| {
                    t.expires
                        .is_some_and(|at| std::time::SystemTime::now() + EXEC_EXPIRY_MARGIN >= at)
                });
                if stale {
                    rerun(config, base, &mut cached, budget);
                }
                cached.as_ref().map(|t| t.token.clone())
            }
        }
    }

    /// Re-reads a token file (or runs the exec plugin, within `budget`) now; `false` when the
    /// token comes from neither.
    fn refresh(&self, budget: Duration) -> bool {
        match self {
            TokenSource::File { path, cached, .. } => {
                reload(path, &mut cached.lock());
                true
            }
            TokenSource::Exec {
                config,
                base,
                cached,
            } => {
                rerun(config, base, &mut cached.lock(), budget);
                true
            }
            _ => false,
        }
    }
}

fn reload(path: &std::path::Path, cached: &mut CachedToken) {
    match read_token(path) {
        Ok(token) => cached.token = token,
        Err(e) => log::warn!(
            "kubernetes token file {} could not be re-read ({:?}); keeping the last token",
            path.display(),
            e.kind()
        ),
    }
    cached.read_at = Instant::now();
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// One request: what is sent, never logged beyond its method and path template.
struct Request<'a> {
    method: Method,
    path: &'a str,
    query: Vec<(&'static str, &'a str)>,
    body: Option<(Vec<u8>, &'static str)>,
    /// The media types asked for.
    accept: &'static str,
    /// The largest answer body read.
    limit: u64,
}

/// What is left of one call's request timeout (SPEC W2: a request is bounded by the request
/// timeout, not the lease): its deadline is computed once, when the call starts, and every
/// wait of the call, retries included, spends it.
#[derive(Clone, Copy, Debug)]
struct Budget {
    deadline: Instant,
}

impl Budget {
    fn starting_now(timeout: Duration) -> Budget {
        Budget {
            deadline: Instant::now() + timeout,
        }
    }

    /// What is left; zero once the deadline has passed.
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// One answer, body read in full (never logged).
struct Reply {
    status: u16,
    retry_after: Option<u64>,
    body: Vec<u8>,
}

/// An answer that is not a Kubernetes object, as sent: what a Pod answered through the API
/// server's proxy, or the API server's own `Status` when it could not ask the Pod. Its body is
/// the peer's free text: callers read a bounded code from it or nothing, and never log it.
pub struct RawReply {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Reply {
    fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

impl Client {
    /// A client for `conn`. Makes no request; reads a token file once to fail early.
    pub fn new(conn: Connection) -> Result<Client, ConnectionError> {
        let mut tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(RootCerts::new_with_certs(&conn.ca_certs));
        let token = match conn.auth {
            Auth::None => TokenSource::None,
            Auth::Token(token) => TokenSource::Static(token),
            Auth::TokenFile(path) => {
                let token = read_token(&path)?;
                TokenSource::File {
                    path,
                    cached: Mutex::new(CachedToken {
                        token,
                        read_at: Instant::now(),
                    }),
                    refresh_every: TOKEN_REFRESH,
                }
            }
            Auth::ClientCert { chain, key } => {
                tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
                TokenSource::None
            }
            // Run once now, so a plugin that cannot answer stops start-up naming it.
            Auth::Exec { config, base } => {
                let token = exec::run(&config, &base, exec::EXEC_TIMEOUT)?;
                TokenSource::Exec {
                    config,
                    base,
                    cached: Mutex::new(Some(token)),
                }
            }
        };
        let config = ureq::config::Config::builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(None)
            .https_only(true)
            .tls_config(tls.build())
            .user_agent(concat!("occ-worker/", env!("CARGO_PKG_VERSION")))
            .max_idle_connections(16)
            .max_idle_connections_per_host(16)
            .build();
        // TCP under TLS, the socket kept where a lost claim can shut it down.
        let connector =
            AbortableConnector(TcpConnector::default()).chain(RustlsConnector::default());
        Ok(Client {
            server: conn.server,
            agent: ureq::Agent::with_parts(
                config,
                connector,
                NamingResolver(DefaultResolver::default()),
            ),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            limiter: RateLimiter::new(DEFAULT_QPS, DEFAULT_BURST),
            token,
            requests: AtomicU64::new(0),
        })
    }

    /// The same client, bounding each call by `timeout` instead of `DEFAULT_REQUEST_TIMEOUT`.
    pub fn with_request_timeout(self, timeout: Duration) -> Client {
        Client {
            request_timeout: timeout,
            ..self
        }
    }

    /// The same client, sending at most `qps` requests a second on average and `burst` at
    /// once, over all the threads that share it.
    pub fn with_rate_limit(self, qps: f64, burst: u32) -> Client {
        Client {
            limiter: RateLimiter::new(qps, burst),
            ..self
        }
    }

    /// The API server's base URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// How many requests were sent (retries included).
    /// How many passes of about `PASS_REQUESTS` requests (at most the burst) the rate limit
    /// serves now without a wait: the tokens available, in whole passes.
    pub fn passes_within_rate_limit(&self) -> usize {
        let per_pass = f64::from(PASS_REQUESTS).min(self.limiter.burst);
        (self.limiter.available(Instant::now()).max(0.0) / per_pass) as usize
    }

    /// Whether a pass that would wait past its patience for the rate limit defers (SPEC Q10):
    /// only where the limit serves a whole pass within a second, so a deferred pass can
    /// succeed later; under a lower limit the waits stay in the pass, bounded by the request
    /// timeout, as before.
    fn defers_waits(&self) -> bool {
        self.limiter.qps >= f64::from(PASS_REQUESTS)
    }

    pub fn request_count(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Reads one object; `None` when it does not exist (404).
    pub fn get(&self, path: &str, cancel: &CancelToken) -> Result<Option<Value>, KubeError> {
        let reply = self.execute(Request::new(Method::Get, path), cancel)?;
        match reply.status {
            404 => Ok(None),
            _ => expect_object(Method::Get, path, reply).map(Some),
        }
    }

    /// Reads every item of a collection, page by page, optionally filtered by labels.
    pub fn list(
        &self,
        path: &str,
        label_selector: Option<&str>,
        cancel: &CancelToken,
    ) -> Result<Vec<Value>, KubeError> {
        let mut items = Vec::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let mut request = Request::new(Method::Get, path);
            request.query.push(("limit", LIST_PAGE_SIZE));
            if let Some(selector) = label_selector {
                request.query.push(("labelSelector", selector));
            }
            if let Some(token) = next.as_deref() {
                request.query.push(("continue", token));
            }
            let reply = self.execute(request, cancel)?;
            let mut page = expect_object(Method::Get, path, reply)?;
            match page.get_mut("items").map(Value::take) {
                Some(Value::Array(page_items)) => items.extend(page_items),
                Some(Value::Null) | None => {}
                Some(_) => return Err(KubeError::decode(Method::Get, path, None)),
            }
            next = page
                .pointer("/metadata/continue")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if next.is_none() {
                return Ok(items);
            }
        }
        Err(KubeError::decode(Method::Get, path, None))
    }

    /// Creates an object in a collection; an existing one is `KubeErrorKind::AlreadyExists`.
    pub fn create(
        &self,
        collection_path: &str,
        body: &Value,
        cancel: &CancelToken,
    ) -> Result<Value, KubeError> {
        let request = Request::with_body(Method::Post, collection_path, body, "application/json")?;
        let reply = self.execute(request, cancel)?;
        expect_object(Method::Post, collection_path, reply)
    }

    /// Replaces an object (PUT); a stale `resourceVersion` is `KubeErrorKind::Conflict`.
    pub fn replace(
        &self,
        path: &str,
        body: &Value,
        cancel: &CancelToken,
    ) -> Result<Value, KubeError> {
        let request = Request::with_body(Method::Put, path, body, "application/json")?;
        let reply = self.execute(request, cancel)?;
        expect_object(Method::Put, path, reply)
    }

    /// Applies a JSON merge patch (RFC 7386).
    pub fn merge_patch(
        &self,
        path: &str,
        patch: &Value,
        cancel: &CancelToken,
    ) -> Result<Value, KubeError> {
        let request =
            Request::with_body(Method::Patch, path, patch, "application/merge-patch+json")?;
        let reply = self.execute(request, cancel)?;
        expect_object(Method::Patch, path, reply)
    }

    /// Deletes an object, with a `propagationPolicy` (`Foreground`, `Background`, `Orphan`)
    /// when given; `None` when it was already gone (404). The answer is the object (being
    /// deleted) or a `Status`.
    pub fn delete(
        &self,
        path: &str,
        propagation: Option<&str>,
        cancel: &CancelToken,
    ) -> Result<Option<Value>, KubeError> {
        let mut request = Request::new(Method::Delete, path);
        if let Some(policy) = propagation {
            request.query.push(("propagationPolicy", policy));
        }
        let reply = self.execute(request, cancel)?;
        match reply.status {
            404 => Ok(None),
            _ => expect_object(Method::Delete, path, reply).map(Some),
        }
    }

    /// Posts a body that is not a create of a named object, e.g. a SelfSubjectAccessReview or
    /// a TokenRequest.
    pub fn post(&self, path: &str, body: &Value, cancel: &CancelToken) -> Result<Value, KubeError> {
        let request = Request::with_body(Method::Post, path, body, "application/json")?;
        let reply = self.execute(request, cancel)?;
        expect_object(Method::Post, path, reply)
    }

    /// Reads a path whose answer is not a Kubernetes object (a Pod's own endpoint through the
    /// API server's proxy, `…/pods/{name}:{port}/proxy/{path}`): every status is an answer,
    /// returned raw. One attempt, no 401 or 429 retry, within the call's budget like any other
    /// request, and bounded by `limit` bytes of body (a longer one is `Decode`).
    pub fn get_raw(
        &self,
        path: &str,
        limit: u64,
        cancel: &CancelToken,
    ) -> Result<RawReply, KubeError> {
        let mut request = Request::new(Method::Get, path);
        request.accept = "text/plain, */*";
        request.limit = limit;
        let budget = Budget::starting_now(self.request_timeout);
        let reply = self.send(&request, budget, cancel)?;
        Ok(RawReply {
            status: reply.status,
            body: reply.body,
        })
    }

    /// Sends a request, retrying once after a 401 with a re-read token file and up to
    /// `MAX_THROTTLE_RETRIES` times after a 429, sleeping `Retry-After` (default 1 s), all
    /// within one budget of the request timeout: a retry whose wait does not fit what is left
    /// is not sent, and the call returns the answer it has (a 401 or a 429, as when the
    /// retries run out).
    fn execute(&self, request: Request<'_>, cancel: &CancelToken) -> Result<Reply, KubeError> {
        let budget = Budget::starting_now(self.request_timeout);
        let mut reauthenticated = false;
        let mut throttled = 0;
        loop {
            let reply = self.send(&request, budget, cancel)?;
            match reply.status {
                401 if !reauthenticated
                    && !budget.left().is_zero()
                    && self.token.refresh(budget.left()) =>
                {
                    reauthenticated = true;
                    log::info!(
                        "kubernetes {} {}: 401, retrying with a re-read token",
                        request.method.as_str(),
                        path_template(request.path)
                    );
                }
                429 if throttled < MAX_THROTTLE_RETRIES => {
                    let wait = reply
                        .retry_after
                        .map_or(Duration::from_secs(1), Duration::from_secs);
                    if self.defers_waits() && cancel.patience().is_some_and(|p| wait > p) {
                        log::debug!(
                            "kubernetes {} {}: 429, Retry-After past the pass's patience",
                            request.method.as_str(),
                            path_template(request.path)
                        );
                        return Err(KubeError::throttled(request.method, request.path, wait));
                    }
                    if wait >= budget.left() {
                        log::debug!(
                            "kubernetes {} {}: 429, Retry-After past the request timeout",
                            request.method.as_str(),
                            path_template(request.path)
                        );
                        return Ok(reply);
                    }
                    throttled += 1;
                    log::debug!(
                        "kubernetes {} {}: 429, retry {throttled} in {} ms",
                        request.method.as_str(),
                        path_template(request.path),
                        wait.as_millis()
                    );
                    cancel
                        .sleep(wait)
                        .map_err(|c| KubeError::cancelled(request.method, request.path, c))?;
                }
                _ => return Ok(reply),
            }
        }
    }

    /// Sends one request: a cancellation point, within what is left of `budget` (the rate
    /// limiter's wait and a token refresh included) and interrupted when `cancel` is (the
    /// token is current on this thread meanwhile). A budget spent before the request goes
    /// out is a transport timeout, as one spent on the wire is. A transport failure after
    /// which the token is cancelled is `Cancelled`.
    fn send(
        &self,
        request: &Request<'_>,
        budget: Budget,
        cancel: &CancelToken,
    ) -> Result<Reply, KubeError> {
        let (method, path) = (request.method, request.path);
        let cancelled = |c| KubeError::cancelled(method, path, c);
        let timed_out = || KubeError::timed_out(method, path, &self.server);
        cancel.check().map_err(cancelled)?;
        // The client-side rate limit, like client-go's: a large fleet or a restart never floods
        // a shared API server. A lost claim ends the wait; a wait past the budget is not taken,
        // nor one past the pass's patience (SPEC Q10: the pass ends pending instead).
        let left = budget.left();
        let patience = cancel
            .patience()
            .filter(|p| *p < left && self.defers_waits());
        let wait = match self
            .limiter
            .reserve_within(Instant::now(), patience.unwrap_or(left))
        {
            Ok(wait) => wait,
            Err(wait) if patience.is_some() => {
                return Err(KubeError::throttled(method, path, wait));
            }
            Err(_) => return Err(timed_out()),
        };
        if !wait.is_zero() {
            cancel.sleep(wait).map_err(cancelled)?;
        }
        let _current = cancel.enter();
        let started = std::time::Instant::now();
        let limit = request.limit;
        let mut builder = ureq::http::Request::builder()
            .method(method.as_str())
            .uri(request.url(&self.server))
            .header("accept", request.accept);
        if let Some(token) = self.token.current(budget.left()) {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        let timeout = budget.left();
        if timeout.is_zero() {
            return Err(timed_out());
        }
        let result = match &request.body {
            None => builder.body(()).map(|r| self.run(r, timeout, limit)),
            Some((bytes, content_type)) => builder
                .header("content-type", *content_type)
                .body(bytes.as_slice())
                .map(|r| self.run(r, timeout, limit)),
        };
        let result = result.map_err(|_| KubeError::new(KubeErrorKind::Other, method, path))?;
        if let Ok(reply) = &result {
            log::trace!(
                "kubernetes {} {}: {} in {} µs",
                method.as_str(),
                path_template(path),
                reply.status,
                started.elapsed().as_micros()
            );
        }
        result.map_err(|e| match cancel.check() {
            // A request cut short by a lost claim is a cancellation, not an outage.
            Err(c) => cancelled(c),
            Ok(()) => {
                let error = transport_error(method, path, &e, &self.server);
                log::debug!(
                    "kubernetes {} {}: {}",
                    method.as_str(),
                    error.path,
                    transport_class(&e)
                );
                error
            }
        })
    }

    fn run<S: ureq::AsSendBody>(
        &self,
        request: ureq::http::Request<S>,
        timeout: Duration,
        limit: u64,
    ) -> Result<Reply, ureq::Error> {
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(Some(timeout))
            .build();
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut response = self.agent.run(request)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let body = response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()?;
        Ok(Reply {
            status,
            retry_after,
            body,
        })
    }
}

impl<'a> Request<'a> {
    fn new(method: Method, path: &'a str) -> Request<'a> {
        Request {
            method,
            path,
            query: Vec::new(),
            body: None,
            accept: "application/json",
            limit: BODY_LIMIT,
        }
    }

    fn with_body(
        method: Method,
        path: &'a str,
        body: &Value,
        content_type: &'static str,
    ) -> Result<Request<'a>, KubeError> {
        let bytes = serde_json::to_vec(body)
            .map_err(|_| KubeError::new(KubeErrorKind::Other, method, path))?;
        Ok(Request {
            body: Some((bytes, content_type)),
            ..Request::new(method, path)
        })
    }

    fn url(&self, server: &str) -> String {
        let mut url = format!("{server}{}", self.path);
        for (i, (key, value)) in self.query.iter().enumerate() {
            url.push(if i == 0 && !self.path.contains('?') {
                '?'
            } else {
                '&'
            });
            url.push_str(key);
            url.push('=');
            url.push_str(&encode(value));
        }
        url
    }
}

/// A successful answer decoded as a JSON object, or the error its status and body describe.
fn expect_object(method: Method, path: &str, reply: Reply) -> Result<Value, KubeError> {
    if !reply.is_success() {
        return Err(KubeError::from_reply(method, path, &reply));
    }
    match serde_json::from_slice::<Value>(&reply.body) {
        Ok(value @ Value::Object(_)) => Ok(value),
        _ => Err(KubeError::decode(method, path, Some(reply.status))),
    }
}

/// `Retry-After` in seconds; the HTTP-date form is ignored (the default applies).
fn parse_retry_after(value: &str) -> Option<u64> {
    value.trim().parse().ok()
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A path with object names replaced by `{name}`, for logs and errors:
/// `/api/v1/namespaces/{name}/pods/{name}/status`.
pub fn path_template(path: &str) -> String {
    let path = path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let fixed = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => segments.len(),
    };
    let mut out = String::new();
    for (i, segment) in segments.iter().enumerate() {
        out.push('/');
        if i >= fixed && (i - fixed) % 2 == 1 {
            out.push_str("{name}");
        } else {
            out.push_str(segment);
        }
    }
    out
}

/// ureq's resolver, its lookup failures reported as `HostNotFound` (a failed `getaddrinfo`
/// otherwise comes back as an I/O error like any other), so `transport_cause` can name them.
#[derive(Debug)]
struct NamingResolver(DefaultResolver);

impl Resolver for NamingResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        self.0.resolve(uri, config, timeout).map_err(|e| match e {
            ureq::Error::Io(_) => ureq::Error::HostNotFound,
            e => e,
        })
    }
}

/// `scheme://host:port` of a server URL: no path prefix, query or credentials.
fn endpoint_of(server: &str) -> String {
    match server.parse::<ureq::http::Uri>() {
        Ok(uri) => {
            let scheme = uri.scheme_str().unwrap_or("https");
            let host = uri.host().unwrap_or("?");
            let port = uri.port_u16().unwrap_or(443);
            if host.contains(':') {
                format!("{scheme}://[{host}]:{port}")
            } else {
                format!("{scheme}://{host}:{port}")
            }
        }
        Err(_) => "the configured API server".to_string(),
    }
}

#[cfg(test)]
mod tests;
