//! The layers of the library (ARCHITECTURE.md, "Invariants"; STYLE 15): dependencies point
//! one way. Each rule names a place in `src/` and the crate modules its code (tests aside) never
//! names; the reconcilers' shared floor never names a reconciler, so adding one is a file of
//! its own and a line of `reconcile::registry`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The Rust files at `place` (a file, or a folder and everything below it), with their code
/// before any `#[cfg(test)]` and without comment lines. A `tests.rs` is a test module.
fn code_of(place: &str) -> Vec<(PathBuf, String)> {
    let path = src().join(place);
    let mut files = Vec::new();
    collect(&path, &mut files);
    files
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "tests.rs"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read source");
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let code: Vec<&str> = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            (p, code.join("\n"))
        })
        .collect()
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("read dir") {
            collect(&entry.expect("dir entry").path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The first segments of every path `code` starts with `prefix` (`crate::`, `super::`): for
/// `crate::{a::B, c}` both `a` and `c`.
fn named_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().last();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => break,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        names.insert(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            names.insert(first_segment(&item));
        } else {
            names.insert(first_segment(rest));
        }
    }
    names.remove("");
    names
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The files at `place` that name one of `forbidden` after `prefix`, with what they name.
fn offenders(place: &str, prefix: &str, forbidden: &[&str]) -> Vec<String> {
    code_of(place)
        .into_iter()
        .filter_map(|(path, code)| {
            let named: Vec<String> = named_after(&code, prefix)
                .into_iter()
                .filter(|n| forbidden.contains(&n.as_str()))
                .collect();
            (!named.is_empty()).then(|| format!("{} names {named:?}", path.display()))
        })
        .collect()
}

/// (place, the crate modules its code never names).
const RULES: &[(&str, &[&str])] = &[
    // The ground floor names nothing of the crate.
    ("files.rs", &["*"]),
    ("variable.rs", &["*"]),
    ("cancel.rs", &["*"]),
    ("events.rs", &["*"]),
    ("metrics.rs", &["*"]),
    (
        "db",
        &[
            "compute",
            "queue",
            "reconcile",
            "runtime",
            "health",
            "iam",
            "audit",
        ],
    ),
    // Drivers never talk to the database, and the configuration depends on them, never
    // the reverse.
    (
        "compute",
        &[
            "db",
            "queue",
            "config",
            "installation",
            "reconcile",
            "runtime",
            "health",
            "iam",
            "audit",
            "operator",
            "migrate",
        ],
    ),
    (
        "queue",
        &["compute", "reconcile", "runtime", "health", "iam"],
    ),
    (
        "iam.rs",
        &["compute", "queue", "reconcile", "runtime", "health"],
    ),
    (
        "audit.rs",
        &["compute", "queue", "reconcile", "runtime", "health"],
    ),
    (
        "installation.rs",
        &["reconcile", "runtime", "health", "queue"],
    ),
    ("config.rs", &["reconcile", "runtime", "health", "queue"]),
    ("reconcile", &["runtime", "health"]),
    ("runtime", &["health"]),
];

/// Every crate module, for the rules that forbid them all.
const MODULES: &[&str] = &[
    "audit",
    "cancel",
    "compute",
    "config",
    "credentials",
    "db",
    "events",
    "files",
    "health",
    "iam",
    "installation",
    "metrics",
    "migrate",
    "operator",
    "queue",
    "reconcile",
    "runtime",
    "secret",
    "variable",
];

#[test]
fn each_layer_names_only_the_layers_below_it() {
    let mut broken = Vec::new();
    for (place, forbidden) in RULES {
        let forbidden: Vec<&str> = if forbidden == &["*"] {
            MODULES.to_vec()
        } else {
            forbidden.to_vec()
        };
        broken.extend(offenders(place, "crate::", &forbidden));
    }
    assert!(
        broken.is_empty(),
        "imports that run up a layer: {broken:#?}"
    );
}

/// The reconcilers, and the one module that composes them.
const RECONCILERS: &[&str] = &[
    "agent",
    "namespace",
    "revision",
    "revision_sources",
    "repository_cleanup",
    "sandbox_policy",
    "withdrawal",
    "registry",
    "probe",
];

#[test]
fn the_reconcilers_shared_floor_names_no_reconciler() {
    let mut broken = Vec::new();
    for floor in [
        "reconcile/report.rs",
        "reconcile/policy.rs",
        "reconcile/pass.rs",
        "reconcile/dispatch.rs",
        "reconcile/publish.rs",
        "reconcile/steps.rs",
        "reconcile/rows.rs",
        "reconcile/subnets.rs",
    ] {
        broken.extend(offenders(floor, "super::", RECONCILERS));
        for (path, code) in code_of(floor) {
            let named = named_after(&code, "crate::reconcile::");
            let named: Vec<&String> = named
                .iter()
                .filter(|n| RECONCILERS.contains(&n.as_str()))
                .collect();
            if !named.is_empty() {
                broken.push(format!("{} names {named:?}", path.display()));
            }
        }
    }
    // The runtime reaches the reconcilers only through the registry it is given.
    for (path, code) in code_of("runtime") {
        let named = named_after(&code, "reconcile::");
        let named: Vec<&String> = named
            .iter()
            .filter(|n| RECONCILERS.contains(&n.as_str()))
            .collect();
        if !named.is_empty() {
            broken.push(format!("{} names {named:?}", path.display()));
        }
    }
    assert!(
        broken.is_empty(),
        "the dispatch names a reconciler: {broken:#?}"
    );
}

#[test]
fn the_path_reader_finds_grouped_and_nested_imports() {
    let code = "use crate::{db::Pool, queue::{self, Claim}};\nuse crate::iam;\nlet x = crate::events::Events::stdout();\nsuper::agent::X; my_crate::db";
    let crate_names: Vec<String> = named_after(code, "crate::").into_iter().collect();
    assert_eq!(crate_names, ["db", "events", "iam", "queue"]);
    let super_names: Vec<String> = named_after(code, "super::").into_iter().collect();
    assert_eq!(super_names, ["agent"]);
}

#[test]
fn our_code_has_no_async_fn_and_starts_no_async_runtime() {
    let mut found = Vec::new();
    for (path, code) in code_of("") {
        for needle in ["async fn", "async move", ".await", "tokio::", "#[tokio"] {
            let used = code.match_indices(needle).any(|(at, _)| {
                !code[at + needle.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            });
            if used {
                found.push(format!("{}: {needle}", path.display()));
            }
        }
    }
    assert!(found.is_empty(), "async code in src/: {found:#?}");
}
