//! House rules that keep SQL honest (STYLE 2): every query file is embedded and listed, and
//! migrations are numbered 1..n without gaps.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_sources(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(std::fs::read_to_string(&path).expect("read source"));
        }
    }
}

// STYLE 2, Q-all: a query file nobody embeds is dead or, worse, edited without effect.
#[test]
fn every_query_file_is_embedded_and_every_listed_file_exists() {
    let mut sources = Vec::new();
    rust_sources(&root().join("src"), &mut sources);
    let mut files: Vec<String> = std::fs::read_dir(root().join("sql/queries"))
        .expect("read sql/queries")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in &files {
        assert!(
            file.ends_with(".sql"),
            "sql/queries/{file} is not a .sql file"
        );
        let needle = format!("sql/queries/{file}\")");
        assert!(
            sources
                .iter()
                .any(|s| s.contains("include_str!(") && s.contains(&needle)),
            "sql/queries/{file} is not include_str!-ed anywhere in src/"
        );
    }
    for listed in occ_worker::queue::QUERY_FILES {
        assert!(
            files.iter().any(|f| f == listed),
            "queue::QUERY_FILES names {listed}, which is not in sql/queries"
        );
    }
}

// STYLE 2: forward-only migrations V1..Vn, no gaps, every file embedded.
#[test]
fn migrations_are_numbered_one_to_n_in_sequence() {
    let embedded = occ_worker::migrate::embedded_names();
    let versions: Vec<i32> = embedded.iter().map(|(v, _)| *v).collect();
    let expected: Vec<i32> = (1..=embedded.len() as i32).collect();
    assert_eq!(
        versions, expected,
        "migration versions must be 1..n: {embedded:?}"
    );
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join("sql"))
        .expect("read sql")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    on_disk.sort();
    let mut names: Vec<String> = embedded
        .iter()
        .map(|(v, n)| format!("V{v}__{n}.sql"))
        .collect();
    names.sort();
    assert_eq!(
        on_disk, names,
        "every sql/V{{n}}__name.sql file is an embedded migration"
    );
}

// Test tooling (`run --test-reconciler`, `bench`, which drops databases) is
// compiled only with the `test-tooling` feature, and the shipped image never enables it.
#[test]
fn test_tooling_stays_out_of_the_shipped_binary() {
    // The image's binary is built by scripts/build-image (the Dockerfile only copies it).
    let script =
        std::fs::read_to_string(root().join("scripts/build-image")).expect("read build-image");
    let build = script
        .lines()
        .find(|l| l.trim_start().starts_with("cargo build"))
        .expect("scripts/build-image builds the binary");
    assert!(
        !build.contains("--features") && !build.contains("--all-features"),
        "the image's build enables features: {build}"
    );
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).expect("read Dockerfile");
    assert!(
        !dockerfile.contains("cargo"),
        "the Dockerfile copies the binary scripts/build-image built"
    );
    let cli = std::fs::read_to_string(root().join("src/cli/mod.rs")).expect("read cli");
    assert!(cli.contains("#[cfg(feature = \"test-tooling\")]\nmod bench;"));
    let worker = std::fs::read_to_string(root().join("src/cli/worker.rs")).expect("read worker");
    assert!(worker.contains(
        "#[cfg(feature = \"test-tooling\")]\n    #[arg(long, hide = true)]\n    test_reconciler"
    ));
}
