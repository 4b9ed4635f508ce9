//! No input from outside can crash the worker: property tests (proptest) over every parser of
//! outside input. Each generates thousands of inputs — arbitrary bytes and text, arbitrary
//! JSON, and valid documents with parts removed, retyped or replaced — and checks that the
//! parser either parses or returns its error with a message, and never panics or takes more
//! than `CASE_LIMIT`.
//!
//! A case that once failed is kept in `tests/proptest-regressions/properties/*.txt` (proptest's
//! regression files, committed) and replayed first on every run. `PROPTEST_CASES` overrides
//! each test's case count; the counts set here keep the whole set within a minute on 2 cores.
//! `a_planted_panic_in_a_parser_fails_its_property` shows a panicking parser fails the same
//! runner every property uses.

mod docker;
mod environment;
mod health;
mod hooks;
mod installation;
mod kubeconfig;
mod kubernetes;
mod sender;
mod settings;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestError, TestRunner};
use serde_json::{Map, Value};
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// No single case may take longer than this (a parser's time must stay linear in its input,
/// and every input here is small).
pub const CASE_LIMIT: Duration = Duration::from_secs(2);

/// The case count: `PROPTEST_CASES` when set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `property` on `cases` values of `strategy`, replaying and keeping failures in the
/// regression file beside `source` (pass `file!()`); a panic inside `property` is a failure,
/// as is a case slower than `CASE_LIMIT`.
pub fn run<S: Strategy>(
    source: &'static str,
    cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Result<(), TestError<S::Value>>
where
    S::Value: Debug,
{
    run_with(
        Some(FileFailurePersistence::SourceParallel(
            "proptest-regressions",
        )),
        source,
        cases,
        strategy,
        property,
    )
}

fn run_with<S: Strategy>(
    persistence: Option<FileFailurePersistence>,
    source: &'static str,
    cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Result<(), TestError<S::Value>>
where
    S::Value: Debug,
{
    let config = Config {
        cases,
        source_file: Some(source),
        failure_persistence: persistence.map(|p| Box::new(p) as _),
        // Shrinking a failure may take many more runs; bound it.
        max_shrink_iters: 2048,
        ..Config::default()
    };
    TestRunner::new(config).run(&strategy, |value| {
        let started = Instant::now();
        property(value)?;
        let took = started.elapsed();
        prop_assert!(took <= CASE_LIMIT, "one case took {took:?}");
        Ok(())
    })
}

/// Fails the test with the minimal failing input proptest found.
pub fn holds<T: Debug>(result: Result<(), TestError<T>>) {
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// An error a parser returned: its message says something, on at most `lines` lines.
pub fn clear_error(message: &str, lines: usize) -> Result<(), TestCaseError> {
    prop_assert!(!message.trim().is_empty(), "an empty error message");
    prop_assert!(
        message.lines().count() <= lines,
        "{} lines: {message}",
        message.lines().count()
    );
    Ok(())
}

/// Strings that break parsers: empty, digits at and past integer limits, signs, whitespace,
/// control characters, any Unicode, long runs.
pub fn edgy_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[0-9]{1,25}",
        "-?[0-9]{1,20}(\\.[0-9]{0,5})?(e-?[0-9]{1,3})?",
        "[a-z0-9.-]{1,80}",
        "[ \t\r\n]{0,4}[a-zA-Z0-9:/._-]{0,30}[ \t\r\n]{0,4}",
        "\\PC{0,40}",
        "[\\x00-\\x1f\\x7f]{1,8}",
        prop::sample::select(vec![
            "0",
            "-1",
            "2147483648",
            "4294967296",
            "9223372036854775808",
            "18446744073709551616",
            "NaN",
            "inf",
            "true",
            "null",
            "http://",
            "https://",
            "unix://",
            "::",
            "0.0.0.0:0",
            "[::1]:99999",
            "1e400",
            "%",
            "%zz",
            "\u{feff}",
            "a\u{0}b",
        ])
        .prop_map(str::to_string),
    ]
}

/// Arbitrary JSON, up to four levels deep.
pub fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("a finite number", |f| {
            serde_json::Number::from_f64(f).map(Value::Number)
        }),
        edgy_string().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-zA-Z]{1,12}", inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// One change to a document: a place (an index into its places, modulo their count) and what
/// happens there.
#[derive(Clone, Debug)]
pub enum Edit {
    Remove(usize),
    Replace(usize, Value),
    /// A key the document does not have, beside a place's existing keys.
    Add(usize, String, Value),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::Remove),
        (any::<usize>(), json()).prop_map(|(at, v)| Edit::Replace(at, v)),
        (any::<usize>(), "[a-zA-Z]{1,12}", json()).prop_map(|(at, k, v)| Edit::Add(at, k, v)),
    ]
}

/// Every place in `doc` (JSON pointers), the root first.
fn places(doc: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match doc {
        Value::Object(map) => {
            for (k, v) in map {
                places(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                places(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn apply(doc: &mut Value, edit: &Edit) {
    let mut all = Vec::new();
    places(doc, String::new(), &mut all);
    let pick = |i: usize| all[i % all.len()].clone();
    match edit {
        Edit::Remove(i) => {
            let at = pick(*i);
            let Some((parent, last)) = at.rsplit_once('/') else {
                *doc = Value::Null;
                return;
            };
            match doc.pointer_mut(parent) {
                Some(Value::Object(map)) => {
                    map.remove(&last.replace("~1", "/").replace("~0", "~"));
                }
                Some(Value::Array(items)) => {
                    if let Ok(i) = last.parse::<usize>() {
                        if i < items.len() {
                            items.remove(i);
                        }
                    }
                }
                _ => {}
            }
        }
        Edit::Replace(i, value) => {
            if let Some(slot) = doc.pointer_mut(&pick(*i)) {
                *slot = value.clone();
            }
        }
        Edit::Add(i, key, value) => {
            if let Some(Value::Object(map)) = doc.pointer_mut(&pick(*i)) {
                map.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
    }
}

/// `valid` with one to four of its parts removed, retyped or replaced: inputs that get past a
/// parser's first checks.
pub fn near(valid: Value) -> impl Strategy<Value = Value> {
    prop::collection::vec(edit(), 1..5).prop_map(move |edits| {
        let mut doc = valid.clone();
        for e in &edits {
            apply(&mut doc, e);
        }
        doc
    })
}

/// `valid`'s bytes with a few bytes replaced, inserted or cut, or cut short.
pub fn near_bytes(valid: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = valid.len().max(1);
    prop::collection::vec((0..len, any::<u8>(), 0u8..4), 1..6).prop_map(move |edits| {
        let mut bytes = valid.clone();
        for (at, byte, how) in edits {
            let at = at.min(bytes.len());
            match how {
                0 if at < bytes.len() => bytes[at] = byte,
                1 => bytes.insert(at, byte),
                2 if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => bytes.truncate(at),
            }
        }
        bytes
    })
}

/// A text input: arbitrary, arbitrary JSON, `valid` edited as JSON, or `valid`'s bytes edited
/// (lossily made UTF-8: these parsers take text).
pub fn text_near(valid: Value) -> impl Strategy<Value = String> {
    let bytes = serde_json::to_vec_pretty(&valid).expect("JSON");
    prop_oneof![
        1 => "\\PC{0,200}",
        1 => json().prop_map(|v| v.to_string()),
        4 => near(valid).prop_map(|v| v.to_string()),
        2 => near_bytes(bytes).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

// The runner every property here uses fails on a panicking parser, and shrinks the failure to a
// small input: plant a panic on inputs with a `~` in a parser that otherwise accepts
// everything, and the property fails with a minimal input that still has one.
#[test]
fn a_planted_panic_in_a_parser_fails_its_property() {
    fn planted(text: &str) -> Result<usize, String> {
        if text.contains('~') {
            panic!("planted");
        }
        Ok(text.len())
    }
    let result = run_with(None, file!(), 256, "[a-z~]{0,40}", |text| {
        planted(&text).map(|_| ()).or_else(|e| clear_error(&e, 1))
    });
    match result {
        Err(TestError::Fail(reason, minimal)) => {
            assert!(reason.to_string().contains("planted"), "{reason}");
            assert_eq!(minimal, "~", "shrunk to the smallest failing input");
        }
        other => panic!("a planted panic passed the property: {other:?}"),
    }
    // The same parser refusing those inputs with an error instead passes the same property.
    fn refusing(text: &str) -> Result<usize, String> {
        if text.contains('~') {
            return Err("a ~ is not allowed".into());
        }
        Ok(text.len())
    }
    holds(run_with(None, file!(), 256, "[a-z~]{0,40}", |text| {
        refusing(&text).map(|_| ()).or_else(|e| clear_error(&e, 1))
    }));
}
