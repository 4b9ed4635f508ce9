//! HTTP requests to the health server (SPEC W5a): any bytes a peer sends get a well-formed
//! answer with one of the statuses the server knows, or a closed connection; the server keeps
//! answering after every one of them.

use super::{holds, near_bytes, run};
use crate::support::{http_exchange, TestDb};
use occ_worker::health::{parse_head, HeadParse, MAX_HEAD};
use occ_worker::runtime::Progress;
use proptest::prelude::*;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// What the server answers `request` (sent whole, then the write side closed): the raw
/// answer, empty when it closed without one.
fn exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let _ = stream.write_all(request);
    let _ = stream.shutdown(Shutdown::Write);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

fn request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(vec!["GET", "HEAD", "POST", "get", "OPTIONS", "", "G\0T"]);
    let path = prop_oneof![
        prop::sample::select(vec![
            "/livez",
            "/readyz",
            "/metrics",
            "/",
            "*",
            "/readyz?x=1"
        ])
        .prop_map(str::to_string),
        "/[ -~]{0,40}",
        "\\PC{0,20}",
    ];
    let version = prop::sample::select(vec!["HTTP/1.1", "HTTP/1.0", "HTTP/2", "HTTP/1.1 x", ""]);
    let header = prop_oneof![
        Just("Host: x".to_string()),
        "Content-Length: [0-9 -]{0,22}",
        Just("Transfer-Encoding: chunked".to_string()),
        "[A-Za-z-]{1,20}: [ -~]{0,40}",
        "[ -~]{0,30}",
    ];
    let structured = (
        method,
        path,
        version,
        prop::collection::vec(header, 0..40),
        any::<bool>(),
    )
        .prop_map(|(m, p, v, headers, crlf)| {
            let eol = if crlf { "\r\n" } else { "\n" };
            let mut text = format!("{m} {p} {v}{eol}");
            for h in headers {
                text.push_str(&h);
                text.push_str(eol);
            }
            text.push_str(eol);
            text.into_bytes()
        });
    let valid = b"GET /readyz HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n".to_vec();
    prop_oneof![
        3 => structured,
        2 => near_bytes(valid),
        1 => prop::collection::vec(any::<u8>(), 0..1024),
        1 => prop::collection::vec(prop::sample::select(b"GET /\r\n: x".to_vec()), 0..12_000),
    ]
}

#[test]
fn every_request_to_the_health_server_gets_a_well_formed_answer_or_a_close() {
    let db = TestDb::bootstrapped();
    let progress = Arc::new(Progress::default());
    progress.tick();
    let server = crate::health::health_server(&db, 2, progress);
    let addr = server.addr;
    crate::support::wait_for("the first probe", Duration::from_secs(10), || {
        http_exchange(addr, b"GET /readyz HTTP/1.1\r\n\r\n") == Some(200)
    });
    holds(run(file!(), super::cases(400), request(), |request| {
        let answer = exchange(addr, &request);
        if answer.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&answer);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| TestCaseError::fail(format!("no head end: {text:?}")))?;
        let status: u16 = head
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| TestCaseError::fail(format!("no status line: {head:?}")))?;
        prop_assert!(
            [200, 400, 404, 405, 408, 413, 431, 503].contains(&status),
            "status {status}"
        );
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| TestCaseError::fail(format!("no Content-Length: {head:?}")))?;
        let head_only = request.starts_with(b"HEAD ");
        prop_assert!(
            body.len() == length || (head_only && body.is_empty()),
            "Content-Length {length}, body {} bytes",
            body.len()
        );
        Ok(())
    }));
    assert_eq!(
        http_exchange(addr, b"GET /livez HTTP/1.1\r\n\r\n"),
        Some(200)
    );
}

// The same requests, and their every cut, through the head parser alone, in thousands of
// cases: a whole head is routed (its path without the query) or refused with a status the
// server knows; a cut one waits for more only while it is under MAX_HEAD.
#[test]
fn every_request_head_is_routed_refused_or_waited_for_within_its_bound() {
    holds(run(
        file!(),
        super::cases(4000),
        (request(), any::<prop::sample::Index>()),
        |(request, cut)| {
            let cut = cut.index(request.len() + 1);
            for bytes in [&request[..], &request[..cut]] {
                match parse_head(bytes) {
                    HeadParse::Complete(head) => {
                        prop_assert!(!head.path.contains('?'), "{:?}", head.path);
                        prop_assert_eq!(head.head_only, bytes.starts_with(b"HEAD "));
                    }
                    HeadParse::Refused(status) => {
                        prop_assert!([400, 405, 413, 431].contains(&status), "status {}", status);
                    }
                    HeadParse::Partial => {
                        prop_assert!(
                            bytes.len() < MAX_HEAD,
                            "{} bytes still partial",
                            bytes.len()
                        );
                    }
                }
            }
            Ok(())
        },
    ));
}
