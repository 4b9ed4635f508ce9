//! Unit tests of the request layer that need no API server.

use super::error::*;
use super::*;
use crate::cancel::{Cancelled, LossCause};
use serde_json::json;

fn status(reason: &str, causes: Value) -> Vec<u8> {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "free text that must never be read",
        "reason": reason,
        "details": {"causes": causes},
    })
    .to_string()
    .into_bytes()
}

#[test]
fn statuses_are_classified_by_structured_fields() {
    let none = json!([]);
    assert_eq!(
        classify(409, &status("AlreadyExists", none.clone())),
        KubeErrorKind::AlreadyExists
    );
    assert_eq!(
        classify(409, &status("Conflict", none.clone())),
        KubeErrorKind::Conflict
    );
    assert_eq!(classify(409, b"not json"), KubeErrorKind::Conflict);
    let terminating =
        json!([{"reason": "NamespaceTerminating", "message": "x", "field": "metadata.namespace"}]);
    assert_eq!(
        classify(403, &status("Forbidden", terminating)),
        KubeErrorKind::NamespaceTerminating
    );
    assert_eq!(
        classify(403, &status("Forbidden", none.clone())),
        KubeErrorKind::Forbidden
    );
    // Free text saying the namespace is terminating is not a structured field.
    let text_only =
        br#"{"kind":"Status","reason":"Forbidden","message":"namespace x is being terminated"}"#;
    assert_eq!(classify(403, text_only), KubeErrorKind::Forbidden);
    let invalid = json!([
        {"reason": "FieldValueRequired", "field": "spec.template.spec.containers[0].image"},
        {"reason": "FieldValueInvalid", "field": "metadata.name"}
    ]);
    assert_eq!(
        classify(422, &status("Invalid", invalid)),
        KubeErrorKind::Invalid {
            field: Some("spec.template.spec.containers[0].image".to_string())
        }
    );
    assert_eq!(classify(422, b""), KubeErrorKind::Invalid { field: None });
    assert_eq!(classify(400, b""), KubeErrorKind::BadRequest);
    assert_eq!(classify(401, b""), KubeErrorKind::Unauthorized);
    assert_eq!(classify(404, b""), KubeErrorKind::NotFound);
    assert_eq!(classify(429, b""), KubeErrorKind::TooManyRequests);
    assert_eq!(classify(500, b""), KubeErrorKind::Unavailable);
    assert_eq!(classify(503, b"<html>"), KubeErrorKind::Unavailable);
    assert_eq!(classify(302, b""), KubeErrorKind::Other);
}

fn reply_error(code: u16, body: Vec<u8>) -> KubeError {
    let reply = Reply {
        status: code,
        retry_after: None,
        body,
    };
    KubeError::from_reply(Method::Post, "/api/v1/namespaces/occ-a/pods", &reply)
}

#[test]
fn errors_carry_status_reason_and_template_but_no_message() {
    let e = reply_error(409, status("AlreadyExists", json!([])));
    assert_eq!(e.kind(), &KubeErrorKind::AlreadyExists);
    assert_eq!(e.status(), Some(409));
    assert_eq!(e.reason(), Some("AlreadyExists"));
    assert_eq!(
        e.to_string(),
        "kubernetes POST /api/v1/namespaces/{name}/pods: already exists (status 409, reason AlreadyExists)"
    );
    let e = reply_error(422, status("Invalid", json!([{"field": "spec.replicas"}])));
    assert_eq!(
        e.to_string(),
        "kubernetes POST /api/v1/namespaces/{name}/pods: invalid field spec.replicas (status 422, reason Invalid)"
    );
    assert!(!format!("{e:?}").contains("free text"));
    let e = reply_error(403, status("Forbidden <script>", json!([])));
    assert_eq!(e.reason(), Some("Forbiddenscript"));
}

#[test]
fn errors_map_to_compute_errors() {
    use crate::compute::ComputeErrorKind as C;
    let compute = |code: u16, reason: &str| {
        reply_error(code, status(reason, json!([]))).into_compute("KUBERNETES_BAD_REQUEST")
    };
    let e = compute(503, "ServiceUnavailable");
    assert!(e.is_transient());
    assert_eq!(
        (e.status(), e.reason()),
        (Some(503), Some("ServiceUnavailable"))
    );
    assert!(compute(429, "TooManyRequests").is_transient());
    assert_eq!(compute(409, "Conflict").kind(), &C::Retryable);
    assert_eq!(
        compute(403, "Forbidden").kind(),
        &C::Denied("KUBERNETES_FORBIDDEN".into())
    );
    // A 401 that outlived the token's re-read retries within the budget.
    let unauthorized = compute(401, "Unauthorized");
    assert_eq!(unauthorized.kind(), &C::Retryable);
    assert_eq!(unauthorized.reason(), Some("Unauthorized"));
    assert_eq!(
        compute(422, "Invalid").kind(),
        &C::Permanent("KUBERNETES_INVALID_REQUEST".to_string())
    );
    assert_eq!(
        compute(400, "BadRequest").kind(),
        &C::Permanent("KUBERNETES_BAD_REQUEST".to_string())
    );
    let terminating = reply_error(
        403,
        status("Forbidden", json!([{"reason": "NamespaceTerminating"}])),
    )
    .into_compute("X");
    assert_eq!(terminating.kind(), &C::Retryable);
    let decode = KubeError::decode(Method::Get, "/api/v1/namespaces", Some(200)).into_compute("X");
    assert_eq!(
        (decode.kind(), decode.class()),
        (&C::Retryable, "kubernetes_decode")
    );
    let transport = KubeError::new(KubeErrorKind::Transport, Method::Get, "/version");
    assert!(transport.into_compute("X").is_transient());
    let cancelled =
        KubeError::cancelled(Method::Get, "/version", Cancelled(LossCause::LeaseLapsed));
    assert_eq!(
        cancelled.into_compute("X").kind(),
        &C::Cancelled(Cancelled(LossCause::LeaseLapsed))
    );
}

#[test]
fn path_templates_hide_names() {
    assert_eq!(path_template("/api/v1/namespaces"), "/api/v1/namespaces");
    assert_eq!(
        path_template("/api/v1/namespaces/occ-a"),
        "/api/v1/namespaces/{name}"
    );
    assert_eq!(
        path_template("/apis/apps/v1/namespaces/occ-a/deployments/agent-x/status?x=1"),
        "/apis/apps/v1/namespaces/{name}/deployments/{name}/status"
    );
    assert_eq!(
        path_template("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    );
    assert_eq!(path_template("/version"), "/version");
}

#[test]
fn queries_are_encoded() {
    let mut request = Request::new(Method::Get, "/api/v1/pods");
    request.query.push((
        "labelSelector",
        "occ.agent=a b,app.kubernetes.io/managed-by=occ-worker",
    ));
    request.query.push(("limit", "500"));
    assert_eq!(
        request.url("https://k:6443"),
        "https://k:6443/api/v1/pods?labelSelector=occ.agent%3Da%20b%2Capp.kubernetes.io%2Fmanaged-by%3Docc-worker&limit=500"
    );
    assert_eq!(parse_retry_after(" 7 "), Some(7));
    assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
}

const CERT: &str = include_str!("../../../../tests/fixtures/kubernetes/ca.crt");
const KEY: &str = include_str!("../../../../tests/fixtures/kubernetes/ca.key");

fn connection(server: &str, auth: Auth) -> Connection {
    Connection {
        server: server.to_string(),
        ca_certs: vec![ureq::tls::Certificate::from_pem(CERT.as_bytes()).unwrap()],
        auth,
        source: "test".to_string(),
    }
}

#[test]
fn the_client_is_shared_by_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Client>();
}

#[test]
fn a_cancelled_pass_sends_nothing() {
    let client = Client::new(connection("https://127.0.0.1:1", Auth::Token("t".into()))).unwrap();
    let cancel = CancelToken::unbounded();
    cancel.cancel(LossCause::RenewalRefused);
    let e = client.get("/api/v1/namespaces/x", &cancel).unwrap_err();
    assert_eq!(
        e.kind(),
        &KubeErrorKind::Cancelled(Cancelled(LossCause::RenewalRefused))
    );
    assert_eq!(client.request_count(), 0);
}

#[test]
fn a_refused_connection_is_a_transport_error() {
    let client = Client::new(connection("https://127.0.0.1:1", Auth::None)).unwrap();
    let e = client
        .list("/api/v1/namespaces", Some("a=b"), &CancelToken::unbounded())
        .unwrap_err();
    assert_eq!(e.kind(), &KubeErrorKind::Transport);
    assert_eq!(client.request_count(), 1);
    // The operator reads the address and why it could not be reached.
    assert!(
        e.to_string()
            .ends_with("(ConnectionRefused at https://127.0.0.1:1)"),
        "{e}"
    );
    let e = e.into_compute("X");
    assert!(e.is_transient());
    assert_eq!(e.reason(), Some("ConnectionRefused"));
    assert_eq!(e.endpoint(), Some("https://127.0.0.1:1"));
}

#[test]
fn an_unknown_host_is_a_dns_failure_naming_the_address() {
    let client = Client::new(connection(
        "https://occ-no-such-host.invalid:6443/prefix",
        Auth::None,
    ))
    .unwrap();
    let e = client
        .get("/version", &CancelToken::unbounded())
        .unwrap_err()
        .into_compute("X");
    assert!(e.is_transient());
    assert_eq!(e.reason(), Some("DNSLookupFailed"), "{e}");
    // The path prefix is not part of the address.
    assert_eq!(e.endpoint(), Some("https://occ-no-such-host.invalid:6443"));
}

#[test]
fn token_files_are_reread_after_the_interval_or_on_demand() {
    let dir = std::env::temp_dir().join(format!("occ-kube-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("token");
    std::fs::write(&path, "first\n").unwrap();
    let source = TokenSource::File {
        path: path.clone(),
        cached: Mutex::new(CachedToken {
            token: read_token(&path).unwrap(),
            read_at: Instant::now(),
        }),
        refresh_every: Duration::from_millis(50),
    };
    std::fs::write(&path, "second\n").unwrap();
    assert_eq!(
        source.current(Duration::from_secs(1)).as_deref(),
        Some("first")
    );
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(
        source.current(Duration::from_secs(1)).as_deref(),
        Some("second")
    );
    std::fs::write(&path, "third\n").unwrap();
    assert!(source.refresh(Duration::from_secs(1)));
    assert_eq!(
        source.current(Duration::from_secs(1)).as_deref(),
        Some("third")
    );
    // A failed re-read keeps the last good token.
    std::fs::remove_file(&path).unwrap();
    assert!(source.refresh(Duration::from_secs(1)));
    assert_eq!(
        source.current(Duration::from_secs(1)).as_deref(),
        Some("third")
    );
    assert!(!TokenSource::Static("s".into()).refresh(Duration::from_secs(1)));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn clients_build_from_every_kind_of_credential() {
    let key = ureq::tls::PrivateKey::from_pem(KEY.as_bytes()).unwrap();
    let chain = vec![ureq::tls::Certificate::from_pem(CERT.as_bytes()).unwrap()];
    let client = Client::new(connection(
        "https://k:6443",
        Auth::ClientCert { chain, key },
    ))
    .unwrap();
    assert_eq!(client.server(), "https://k:6443");
    let missing = PathBuf::from("/nonexistent/occ/token");
    let err = Client::new(connection("https://k:6443", Auth::TokenFile(missing)))
        .err()
        .unwrap();
    assert_eq!(
        err.kind(),
        super::super::connection_error::ConnectionErrorKind::Io
    );
}

#[test]
fn the_rate_limiter_lets_a_burst_through_then_spaces_requests_at_qps() {
    let limiter = RateLimiter::new(10.0, 2);
    let t0 = Instant::now();
    // The burst goes at once; each next request waits a tenth of a second more.
    let waits: Vec<Duration> = (0..5).map(|_| limiter.reserve(t0)).collect();
    let ms: Vec<u128> = waits.iter().map(|w| w.as_millis()).collect();
    assert_eq!(ms, vec![0, 0, 100, 200, 300]);
    // An idle second refills the bucket to its burst, never beyond.
    let later = t0 + Duration::from_secs(5);
    let ms: Vec<u128> = (0..3).map(|_| limiter.reserve(later).as_millis()).collect();
    assert_eq!(ms, vec![0, 0, 100]);
}

#[test]
fn the_rate_limiter_queues_concurrent_callers_in_order() {
    let limiter = std::sync::Arc::new(RateLimiter::new(100.0, 1));
    let t0 = Instant::now();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let limiter = limiter.clone();
            std::thread::spawn(move || limiter.reserve(t0))
        })
        .collect();
    let mut waits: Vec<u128> = threads
        .into_iter()
        .map(|t| t.join().unwrap().as_millis())
        .collect();
    waits.sort();
    // No two callers share a slot: 0, 10, 20, … ms.
    assert_eq!(waits, (0..8).map(|i| i * 10).collect::<Vec<u128>>());
}

#[test]
fn the_rate_limiter_takes_no_token_for_a_wait_past_the_budget() {
    let limiter = RateLimiter::new(1.0, 1);
    let now = Instant::now();
    let short = Duration::from_millis(500);
    assert_eq!(limiter.reserve_within(now, short), Ok(Duration::ZERO));
    // Refused with the wait it would have been.
    assert_eq!(
        limiter.reserve_within(now, short),
        Err(Duration::from_secs(1))
    );
    // Nothing was taken: the next token is still one second away.
    assert_eq!(
        limiter.reserve_within(now, Duration::from_secs(2)),
        Ok(Duration::from_secs(1))
    );
}

#[test]
fn a_pass_out_of_patience_is_throttled_before_it_sends_and_takes_no_token() {
    // SPEC Q10: ten tokens a second, one at a time, the one spent by the first request
    // (refused by the closed port); a pass out of patience is not kept waiting for the next.
    let client = Client::new(connection("https://127.0.0.1:1", Auth::None))
        .unwrap()
        .with_rate_limit(10.0, 1);
    let first = client
        .get("/api/v1/namespaces/x", &CancelToken::unbounded())
        .unwrap_err();
    assert_eq!(first.kind(), &KubeErrorKind::Transport);
    let spent = CancelToken::unbounded().with_patience(Duration::ZERO);
    let e = client.get("/api/v1/namespaces/x", &spent).unwrap_err();
    let KubeErrorKind::Throttled(after) = e.kind() else {
        panic!("throttled, got {e}");
    };
    assert!(*after > Duration::ZERO, "{after:?}");
    assert_eq!(client.request_count(), 1, "nothing sent");
    // Deferred with the driver's code, the wait it would have been as its recheck.
    let c = e.into_compute("X");
    assert!(matches!(
        c.kind(),
        crate::compute::ComputeErrorKind::Deferred {
            code: "KUBERNETES_CLIENT_THROTTLED",
            ..
        }
    ));
    // A caller without a bound waits for the next token and sends.
    let e = client
        .get("/api/v1/namespaces/x", &CancelToken::unbounded())
        .unwrap_err();
    assert_eq!(e.kind(), &KubeErrorKind::Transport);
    assert_eq!(client.request_count(), 2);
}

#[test]
fn the_rate_limit_serves_whole_passes() {
    let client = Client::new(connection("https://127.0.0.1:1", Auth::None))
        .unwrap()
        .with_rate_limit(20.0, 40);
    assert_eq!(client.passes_within_rate_limit(), 4);
    // A burst under a pass counts a pass at the burst.
    let small = Client::new(connection("https://127.0.0.1:1", Auth::None))
        .unwrap()
        .with_rate_limit(1.0, 3);
    assert_eq!(small.passes_within_rate_limit(), 1);
    let limiter = RateLimiter::new(1.0, 3);
    let now = Instant::now();
    for _ in 0..5 {
        let _ = limiter.reserve(now);
    }
    // Waits reserved past the tokens count as none available.
    assert!(limiter.available(now) < 0.0);
}

#[test]
fn a_limit_too_low_to_serve_a_pass_within_a_second_keeps_its_waits() {
    // Deferring would never end under 2 qps: the pass waits, within its request timeout.
    let client = Client::new(connection("https://127.0.0.1:1", Auth::None))
        .unwrap()
        .with_rate_limit(2.0, 1);
    let _ = client.get("/api/v1/namespaces/x", &CancelToken::unbounded());
    let spent = CancelToken::unbounded().with_patience(Duration::ZERO);
    let e = client.get("/api/v1/namespaces/x", &spent).unwrap_err();
    assert_eq!(e.kind(), &KubeErrorKind::Transport, "{e}");
    assert_eq!(client.request_count(), 2);
}
