//! The README runs as written: every `sh` block carries a marker, and the blocks
//! marked `readme-test: run` are executed in order, in one shell, exactly as a new user would
//! type them, so the walk-throughs cannot drift from the code.
//!
//! The shell starts in a scratch checkout (the real `scripts/` and the built binary, linked)
//! under a mode-700 directory, so as root it also proves that the scripts work from a checkout
//! the `postgres` user cannot enter. It runs `scripts/dev` (without the build: the binary is
//! already built) on its own throwaway cluster and the real Docker Engine, under an
//! Installation id of its own, and removes that cluster and that Installation's Docker
//! resources afterwards, whatever happened.

use crate::docker::docker_available;
use crate::support::free_port;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUN: &str = "<!-- readme-test: run -->";
/// A Kubernetes walk-through's block: run by tests/it/kube_guide.rs against the API server fake,
/// with the tests' `kubectl` (tests/it/kubectl.rs), never by the Docker walk-through below.
pub const FAKE: &str = "<!-- readme-test: run against the Kubernetes API fake -->";
const SKIP: &str = "<!-- readme-test: skip (";

/// How a `sh` block is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// In the Docker walk-through.
    Run,
    /// Against the Kubernetes API fake.
    Fake,
    /// Not at all, for the reason its marker gives.
    Skip,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documentation a user reads: README.md and every page of `docs/`, joined.
fn documentation() -> String {
    let mut text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    for page in pages {
        text.push('\n');
        text.push_str(&std::fs::read_to_string(page).unwrap());
    }
    text
}

/// Each `sh` block of the README: (line of its fence, its marker, text).
pub fn blocks(readme: &str) -> Vec<(usize, Marker, String)> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start().starts_with("```sh") {
            let marker = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim())
                .unwrap_or("");
            let run = if marker == RUN {
                Marker::Run
            } else if marker == FAKE {
                Marker::Fake
            } else if marker.starts_with(SKIP) && marker.ends_with(") -->") {
                Marker::Skip
            } else {
                panic!(
                    "README.md:{}: a sh block needs `{RUN}`, `{FAKE}` or `{SKIP}why) -->` on the line before it",
                    i + 1
                );
            };
            let start = i;
            let mut text = String::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                text.push_str(lines[i]);
                text.push('\n');
                i += 1;
            }
            out.push((start + 1, run, text));
        }
        i += 1;
    }
    out
}

/// Deletes the scratch checkout, its cluster and its Installation's Docker resources.
pub struct Scratch {
    pub base: PathBuf,
    pub checkout: PathBuf,
    pub installation: String,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = Command::new(self.checkout.join("scripts/pg-stop"))
            .args(["--reset", "target/pg-dev"])
            .current_dir(&self.checkout)
            .status();
        let label = format!("label=occ.installation={}", self.installation);
        for (list, remove) in [
            (vec!["ps", "-aq", "--filter"], vec!["rm", "-f"]),
            (
                vec!["network", "ls", "-q", "--filter"],
                vec!["network", "rm"],
            ),
        ] {
            let ids = Command::new("docker").args(&list).arg(&label).output();
            let ids = ids.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            for id in ids.unwrap_or_default().split_whitespace() {
                let _ = Command::new("docker")
                    .args(&remove)
                    .arg(id)
                    .stdout(Stdio::null())
                    .status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// A scratch checkout named for this process and `what`: `scripts/`, `deploy/` and the built
/// binaries, linked, under a mode-700 directory.
pub fn scratch_checkout_for(what: &str) -> Scratch {
    let base = std::env::temp_dir().join(format!("occ-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let private = base.join("home");
    let checkout = private.join("checkout");
    std::fs::create_dir_all(checkout.join("target/debug")).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    for dir in ["scripts", "deploy"] {
        std::os::unix::fs::symlink(root().join(dir), checkout.join(dir)).unwrap();
    }
    for (bin, path) in [
        ("occ-worker", env!("CARGO_BIN_EXE_occ-worker")),
        ("occ-hook", env!("CARGO_BIN_EXE_occ-hook")),
        ("occ-git-sender", env!("CARGO_BIN_EXE_occ-git-sender")),
    ] {
        std::os::unix::fs::symlink(path, checkout.join("target/debug").join(bin)).unwrap();
    }
    Scratch {
        base,
        checkout,
        installation: format!("{what}-{}", std::process::id()),
    }
}

fn scratch_checkout() -> Scratch {
    scratch_checkout_for("readme")
}

// Every sh block is marked; every Kubernetes block runs against the API server fake
// (tests/it/kube_guide.rs) except the kind cluster's creation, and none runs in the Docker
// walk-through; the
// development walk-throughs run as written against a throwaway cluster and the Docker Engine.
#[test]
fn the_readme_walk_throughs_run_as_written() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let all = blocks(&readme);
    // Every block of the docs is marked too.
    let documented = blocks(&documentation());
    let kubernetes: Vec<_> = documented
        .iter()
        .filter(|b| b.2.contains("kubectl") || b.2.contains("kind "))
        .collect();
    assert!(kubernetes.len() >= 8, "the Kubernetes blocks are found");
    for block in &kubernetes {
        match block.1 {
            Marker::Fake => {}
            Marker::Run => panic!("a Kubernetes block in the Docker walk-through: {}", block.2),
            Marker::Skip => assert!(
                block.2.contains("kind create cluster"),
                "a Kubernetes block runs against the fake unless it creates the kind cluster: {}",
                block.2
            ),
        }
    }
    let run: Vec<&(usize, Marker, String)> = all.iter().filter(|b| b.1 == Marker::Run).collect();
    assert!(run.len() >= 4, "the walk-throughs are marked to run");
    if !docker_available() {
        return;
    }
    let scratch = scratch_checkout();
    let mut script = String::from(
        "set -euo pipefail\nset -x\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n",
    );
    for (line, _, text) in &run {
        script.push_str(&format!("# README.md:{line}\n{text}"));
    }
    let log = scratch.base.join("walk-through.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(&scratch.checkout)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::var("HOME").unwrap_or_else(|_| "/".into()))
        .env("OCC_DEV_SKIP_BUILD", "1")
        .env("OCC_DEV_INSTALLATION", &scratch.installation)
        .env("OCC_WORKER_HTTP_ADDR", format!("127.0.0.1:{}", free_port()))
        // The Docker Engine may be shared: a pool of its own keeps other projects' leftover
        // networks in the default pool from starving the walk-through.
        .env("OCC_DOCKER_SUBNET_POOL", "10.218.0.0/16:24")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0);
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        cmd.env("DOCKER_HOST", host);
    }
    let mut child = cmd.spawn().expect("bash");
    let started = Instant::now();
    let status = crate::support::child_exit(&mut child, Duration::from_secs(300));
    if status.is_none() {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", child.id())])
            .status();
        let _ = child.wait();
    }
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()),
        "the README walk-throughs failed ({status:?}) after {:?}:\n{output}",
        started.elapsed()
    );
    for expected in [
        "\"status\":\"provisioning\"",
        "status: ready",
        "HARNESS_BINDING_UNSUPPORTED",
        "status: deleting",
        "\"phase\":\"beforeNamespaceDelete\"",
        // `check` called the hook once, and it answered.
        "\"phase\":\"check\"",
        // --wait followed the work to its end, a line per change (no terminal here).
        ":ensure: succeeded · ",
        ":delete: succeeded · ",
        ":reconcile: failed_permanent · HARNESS_BINDING_UNSUPPORTED · ",
        "agent:",
        "\"event\":\"worker.stopping\"",
        "\"event\":\"worker.stopped\"",
    ] {
        assert!(output.contains(expected), "{expected} in:\n{output}");
    }
    assert!(
        !Path::new(&scratch.checkout.join("target/dev.env")).exists(),
        "dev.env is removed when its worker stops"
    );
    eprintln!(
        "README walk-throughs ran in {:?} from {}",
        started.elapsed(),
        scratch.checkout.display()
    );
}

fn rust_sources(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// Every string literal's contents (no escapes in the names this looks for).
fn literals(source: &str) -> Vec<&str> {
    source.split('"').skip(1).step_by(2).collect()
}

// The documentation (README.md and docs/) is self-contained: every event the worker
// emits and every reason code in the source is documented there (a new one without a line
// fails here).
#[test]
fn every_event_and_reason_code_is_in_the_readme() {
    let readme = documentation();
    let mut sources = Vec::new();
    rust_sources(&root().join("src"), &mut sources);
    let mut missing = std::collections::BTreeSet::new();
    for source in &sources {
        for literal in literals(source) {
            let event = (literal.starts_with("worker.") || literal.starts_with("compute."))
                && literal.len() > 8
                && literal[literal.find('.').unwrap() + 1..]
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-');
            let code = literal.contains('_')
                && literal.len() > 4
                && literal
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_uppercase())
                && literal
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                && ![
                    "OCC_",
                    "KUBERNETES_SERVICE_",
                    "DOCKER_HOST",
                    "CARGO_PKG_",
                    "OUT_DIR",
                ]
                .iter()
                .any(|p| literal.starts_with(p));
            if (event || code) && !readme.contains(&format!("`{literal}`")) {
                missing.insert(literal.to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documented nowhere in README.md or docs/ (as `CODE`): {missing:?}"
    );
}

/// The `sh` blocks of a page of `docs/`, joined, as one text (each block's lines).
fn page_blocks(page: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(page)).unwrap();
    blocks(&text).into_iter().map(|(_, _, t)| t).collect()
}

// The Kubernetes walk-throughs: the kind recipe builds nothing twice (scripts/build-image's
// release binaries are the ones run), every wait has a timeout and says what it waits for
// (`--wait`, `work watch --timeout`, `kubectl wait --timeout`, `timeout N … until`), the
// driver file is /etc/occ/driver.json wherever a document names an absolute path for it, and
// `docker run … run` outside a cluster mounts a kubeconfig and names it.
#[test]
fn the_kubernetes_walk_throughs_build_once_bound_every_wait_and_name_one_driver_file() {
    let kubernetes = page_blocks("docs/kubernetes.md");
    let kind = kubernetes
        .iter()
        .find(|b| b.contains("kind create cluster"))
        .expect("the kind recipe");
    assert!(kind.contains("scripts/build-image"), "{kind}");
    for block in &kubernetes {
        assert!(
            !block.contains("cargo build"),
            "scripts/build-image already built the release binaries: {block}"
        );
    }
    let mut every: Vec<String> = page_blocks("README.md");
    for page in ["docs/kubernetes.md", "docs/operating.md"] {
        every.extend(page_blocks(page));
    }
    for block in &every {
        for line in block.lines() {
            let command = line.split(" #").next().unwrap_or_default();
            if command.contains("until ") || command.contains("sleep ") {
                assert!(
                    command.trim_start().starts_with("timeout "),
                    "a wait without a timeout: {line}"
                );
            }
            if command.contains("kubectl wait") {
                assert!(command.contains("--timeout="), "{line}");
            }
            if command.contains("work watch") {
                assert!(command.contains("--timeout"), "{line}");
            }
        }
    }
    let mut paths = Vec::new();
    for text in every.iter().cloned().chain([
        std::fs::read_to_string(root().join("deploy/kubernetes/worker.yaml")).unwrap(),
        documentation(),
    ]) {
        for (i, _) in text.match_indices("OCC_KUBERNETES_CONFIG") {
            let rest = &text[i + "OCC_KUBERNETES_CONFIG".len()..];
            let value: String = rest
                .trim_start_matches(['=', '`', ' '])
                .trim_start_matches("value: ")
                .chars()
                .take_while(|c| !c.is_whitespace() && !"`),;".contains(*c))
                .collect();
            if value.starts_with('/') {
                paths.push(value);
            }
        }
    }
    let worker = std::fs::read_to_string(root().join("deploy/kubernetes/worker.yaml")).unwrap();
    assert!(worker.contains("value: /etc/occ/driver.json"), "{worker}");
    paths.push("/etc/occ/driver.json".into());
    paths.sort();
    paths.dedup();
    assert_eq!(paths, ["/etc/occ/driver.json"], "one driver-file path");
    let operating = page_blocks("docs/operating.md");
    let docker_run = operating
        .iter()
        .find(|b| b.contains("docker run") && b.contains("OCC_COMPUTE_DRIVER=kubernetes"))
        .expect("operating.md's docker run of the worker");
    assert!(
        docker_run.contains("-e KUBECONFIG=") && docker_run.contains(".kube/config:"),
        "outside a cluster `run` needs a kubeconfig mounted: {docker_run}"
    );
}

// SPEC E19: a walk-through that deploys with credential sources creates each first and grants
// the Agent's service principal `operate` on it (the actor alone is not enough).
#[test]
fn every_credential_source_a_walk_through_deploys_is_created_and_granted_first() {
    let mut checked = 0;
    for block in blocks(&documentation()) {
        let text = block.2.replace("\\\n", " ");
        let mut created = Vec::new();
        let mut granted = Vec::new();
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            for (i, w) in words.iter().enumerate() {
                match (*w, words.get(i + 1)) {
                    // credential-source create NAMESPACE ID
                    ("create", Some(_)) if i > 0 && words[i - 1] == "credential-source" => {
                        created.extend(words.get(i + 2).map(|id| id.to_string()));
                    }
                    ("--scope", Some(scope)) => {
                        if let Some((_, id)) = scope
                            .strip_prefix("credential_source:")
                            .and_then(|s| s.split_once('/'))
                        {
                            granted.push(id.to_string());
                        }
                    }
                    ("--credential-source" | "--tool-source", Some(id)) => {
                        checked += 1;
                        assert!(
                            created.iter().any(|c| c == id),
                            "line {}: deploys with credential source {id}, never created before: {line}",
                            block.0
                        );
                        assert!(
                            granted.iter().any(|g| g == id),
                            "line {}: the service principal needs operate on {id} (SPEC E19): {line}",
                            block.0
                        );
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(
        checked >= 3,
        "the walk-throughs deploy with credential sources"
    );
}
