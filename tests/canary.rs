//! The one shape of every secret-like value a test plants (API keys, tokens, Secret data,
//! kubeconfig credentials, hook and sender bodies, harness secrets, provider free text): the
//! marker `occcanary`, a tag naming the use and a per-process counter, all in `[a-z0-9-]`, so
//! it is valid in an environment variable, a header, a Secret's data, a launch value or a JSON
//! string, and a test wraps it where a shape is required (`sk-live-{canary}`, `opaque-{canary}`).
//!
//! `scripts/canary-scan` fails when the marker appears in a captured log line: plain (any
//! case), hex, or base64 (standard and URL-safe are the same here) in each of the three
//! alignments a value can start at in an encoded string (`CANARY_BASE64`).

#![allow(dead_code)] // Each test target uses a subset.

use std::sync::atomic::{AtomicUsize, Ordering};

/// What every canary contains and `scripts/canary-scan` looks for.
pub const CANARY_MARKER: &str = "occcanary";

/// The parts of the marker's base64 form that the bytes around it cannot change, for a marker
/// starting at a byte offset of 0, 1 and 2 modulo 3 (`scripts/canary-scan` greps for these).
pub const CANARY_BASE64: [&str; 3] = ["b2NjY2FuYXJ5", "9jY2NhbmFye", "vY2NjYW5hcn"];

static NEXT: AtomicUsize = AtomicUsize::new(1);

/// A new canary: `occcanary-<tag>-<pid>-<n>`, unique per call and per process. `tag` names the
/// planted value (`api-key`, `kube-token`) and must itself be in `[a-z0-9-]`.
pub fn canary(tag: &str) -> String {
    assert!(
        tag.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
        "a canary tag is [a-z0-9-]: {tag}"
    );
    format!(
        "{CANARY_MARKER}-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether `text` holds a canary in any form `scripts/canary-scan` finds.
pub fn holds_canary(text: &str) -> bool {
    let hex: String = CANARY_MARKER.bytes().map(|b| format!("{b:02x}")).collect();
    text.to_ascii_lowercase().contains(CANARY_MARKER)
        || text.to_ascii_lowercase().contains(&hex)
        || CANARY_BASE64.iter().any(|b| text.contains(b))
}
