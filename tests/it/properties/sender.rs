//! Repository sender answers (SPEC G20, G21): whatever a sender answers to `open`, `close`,
//! `status` or `ready` — any status, any body — the call gives its answer or no answer
//! (`REPOSITORY_SENDER_UNAVAILABLE` with its call, class and status), and never repeats the
//! answer's text.

use super::{holds, json, near, near_bytes, run};
use crate::repository_sender::{opened, Answer, SenderServer, OPEN, SESSION};
use occ_worker::cancel::CancelToken;
use occ_worker::repository::sender::{OpenAnswer, SenderError};
use proptest::prelude::*;
use serde_json::json;
use std::time::Duration;

/// Free text an answer carries that no error may repeat: a canary (tests/canary.rs).
fn answer_text() -> &'static str {
    static VALUE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VALUE.get_or_init(|| crate::support::canary("sender-answer"))
}

#[test]
fn a_repository_sender_answer_is_an_answer_or_no_answer_and_never_panics() {
    let server = SenderServer::start();
    let sender = server.client(Duration::from_secs(5));
    let cancel = CancelToken::unbounded();
    let mut open = opened("s-1", "git-app", "token");
    open["message"] = json!(answer_text());
    let valid = [
        ("open", open),
        ("close", json!({"closed": true, "message": answer_text()})),
        (
            "status",
            json!({"state": "closed", "message": answer_text()}),
        ),
        ("ready", json!({"ready": true, "message": answer_text()})),
    ];
    // Each valid answer is taken as the call's answer.
    for (call, answer) in &valid {
        server.answer(call, Answer::Json(answer.clone()));
    }
    assert!(matches!(
        sender.open(&OPEN, &cancel).unwrap(),
        OpenAnswer::Opened { session_id, .. } if session_id == "s-1"
    ));
    assert!(sender.close(&SESSION, &cancel).unwrap());
    assert!(sender.ready().unwrap());
    let call = prop::sample::select(vec![0usize, 1, 2, 3]);
    let status = prop::sample::select(vec![200, 200, 200, 200, 201, 204, 302, 400, 404, 500, 503]);
    let body = |valid: serde_json::Value| {
        prop_oneof![
            4 => near(valid.clone()).prop_map(|v| v.to_string().into_bytes()),
            1 => json().prop_map(|v| v.to_string().into_bytes()),
            1 => near_bytes(valid.to_string().into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..128),
        ]
    };
    let strategy = (call, status).prop_flat_map(move |(call, status)| {
        (Just(call), Just(status), body(valid[call].1.clone()))
    });
    holds(run(
        file!(),
        super::cases(400),
        strategy,
        |(call, status, body)| {
            let name = ["open", "close", "status", "ready"][call];
            let text = String::from_utf8_lossy(&body).into_owned();
            server.answer(name, raw(status, text));
            let result: Result<(), SenderError> = match call {
                0 => sender.open(&OPEN, &cancel).map(|answer| {
                    if let OpenAnswer::Refused { code } = answer {
                        // A refusal's code is a code, never the answer's free text.
                        assert!(is_code(&code), "refusal code {code:?}");
                    }
                }),
                1 => sender.close(&SESSION, &cancel).map(|_| ()),
                2 => sender.status(&SESSION, &cancel).map(|_| ()),
                _ => sender.ready().map(|_| ()),
            };
            match result {
                Ok(()) => prop_assert_eq!(status, 200, "an answer only from 200"),
                Err(e) => {
                    let shown = format!("{e} {e:?}");
                    prop_assert!(!shown.contains(answer_text()), "answer text in: {shown}");
                    match e {
                        SenderError::Unavailable { call: c, .. } => prop_assert_eq!(c, name),
                        other => prop_assert!(false, "not a cancelled pass: {other:?}"),
                    }
                }
            }
            Ok(())
        },
    ));
}

/// `status` with `text` as the body, exactly as given.
fn raw(status: u16, text: String) -> Answer {
    if status == 200 {
        Answer::Raw(text)
    } else {
        Answer::RawStatus(status, text)
    }
}

/// `^[A-Z][A-Z0-9_]{0,63}$`.
fn is_code(s: &str) -> bool {
    s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}
