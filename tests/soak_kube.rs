//! The Kubernetes half of the soak (`scripts/soak`): the API server fake of `tests/it` and a
//! steady load of Agent deployments, stops and credential withdrawals (SPEC A1, R1, E15), with
//! now and then an Agent deleted and created again (A2), for as long as `scripts/soak` runs.
//! The worker processes are `scripts/soak`'s: it starts them with the environment this
//! program writes, SIGKILLs and restarts them, and samples them; this program only serves the
//! fake and admits the load.
//!
//! Its conversation with `scripts/soak`, through files in `--out`:
//! - it writes `env` (the workers' `KEY=value` lines: database, driver file, kubeconfig,
//!   Installation configuration with its Credential Gateway) and then `ready`;
//! - once the workers run it makes `--namespaces` Namespaces ready and `--agents` Agents, and
//!   admits one step every `--every` seconds: the next step of an Agent whose last work ended
//!   (deploy → withdraw the tool source `search` → stop → deploy …; every `--delete-every`th
//!   cycle the Agent is deleted and another created in its place);
//! - when `stop` appears it admits nothing more, waits for the works in flight, deletes every
//!   Agent, waits for the deletions and for the fake's garbage collector, and writes
//!   `result.json`: works admitted and how they ended, and the objects of deleted Agents left
//!   (the leak verdict), then `done`.
//!
//! `soak_kube --serve --out DIR --database NAME [options]`; the PostgreSQL
//! server comes from `OCC_BENCH_DATABASE_URL` (`--serve` says it is `scripts/soak` asking).
//! Under `cargo test` it is the soak's smoke run instead (see `smoke`).

#[path = "canary.rs"]
mod canary;
#[path = "fleet.rs"]
mod fleet;
#[path = "it/kube_fake/mod.rs"]
mod kube_fake;

use fleet::count;
use kube_fake::{FakeOptions, KubeFake, KubeconfigAuth, DRIVER_FILE};
use occ_worker::compute::kubernetes::names::{self, LABEL_AGENT};
use postgres::{Client, NoTls};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleet::AGENT_OBJECT_KINDS as ALL;
const GATEWAY: &str = "gateway-1";
/// The Credential Gateway needs a Sandbox Driver selected (the Installation file).
const SANDBOX: &str = "sandbox-1";

struct Options {
    out: PathBuf,
    database: String,
    agents: usize,
    namespaces: usize,
    every: Duration,
    delete_every: usize,
    latency: Duration,
    pod_start: Duration,
    qps: u32,
    burst: u32,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        out: PathBuf::from("target/soak/kube"),
        database: "occ_soak_kube".into(),
        agents: 6,
        namespaces: 3,
        every: Duration::from_secs(2),
        delete_every: 4,
        latency: Duration::from_millis(20),
        pod_start: Duration::from_secs(1),
        qps: 20,
        burst: 40,
    };
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench" && a != "--serve")
        .collect();
    let mut it = args.iter();
    fn int<T: std::str::FromStr>(v: Option<&String>, flag: &str) -> Result<T, String> {
        v.and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{flag} needs a positive integer"))
    }
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--out" => o.out = PathBuf::from(it.next().ok_or("--out needs a value")?),
            "--database" => o.database = it.next().ok_or("--database needs a value")?.clone(),
            "--agents" => o.agents = int(it.next(), flag)?,
            "--namespaces" => o.namespaces = int(it.next(), flag)?,
            "--every-ms" => o.every = Duration::from_millis(int(it.next(), flag)?),
            "--delete-every" => o.delete_every = int(it.next(), flag)?,
            "--latency-ms" => o.latency = Duration::from_millis(int(it.next(), flag)?),
            "--pod-start-ms" => o.pod_start = Duration::from_millis(int(it.next(), flag)?),
            "--qps" => o.qps = int(it.next(), flag)?,
            "--burst" => o.burst = int(it.next(), flag)?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.agents == 0 || o.namespaces == 0 || o.delete_every == 0 {
        return Err("--agents, --namespaces and --delete-every must be positive".into());
    }
    if !o
        .database
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err("--database must be a plain identifier".into());
    }
    Ok(o)
}

/// The next step of an Agent's cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Deploy,
    Withdraw,
    Stop,
    Delete,
}

struct Agent {
    namespace: String,
    name: String,
    id: String,
    next: Step,
    cycles: usize,
    /// The work key of its last step, until it ended.
    pending: Option<String>,
}

/// Works admitted and how they ended, by operation and final state and code.
#[derive(Default)]
struct Tally {
    admitted: BTreeMap<&'static str, usize>,
    ended: BTreeMap<String, usize>,
    refused: BTreeMap<&'static str, usize>,
    lost: Vec<String>,
}

fn op(step: Step) -> &'static str {
    match step {
        Step::Deploy => "deploy",
        Step::Withdraw => "withdraw",
        Step::Stop => "stop",
        Step::Delete => "delete",
    }
}

/// Creates the Agent `name` in `ns` with the grants its deployments need.
fn create_agent(c: &mut Client, ns: &str, name: &str) -> Agent {
    let v: Value = c
        .query_one("SELECT occ.agent_create($1, $2, 'admin')", &[&ns, &name])
        .unwrap()
        .get(0);
    let principal = v["servicePrincipalId"].as_str().unwrap().to_string();
    for source in ["model", "search", "mail"] {
        c.execute(
            "INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
             VALUES ($1, 'agent-operator', 'resource', $2, 'credential_source', $3)",
            &[&principal, &ns, &source],
        )
        .unwrap();
    }
    Agent {
        namespace: ns.to_string(),
        name: name.to_string(),
        id: v["id"].as_str().unwrap().to_string(),
        next: Step::Deploy,
        cycles: 0,
        pending: None,
    }
}

/// Admits the Agent's next step; the work key, or the refusal's text.
fn admit(c: &mut Client, a: &Agent, index: usize) -> Result<String, String> {
    let (ns, id) = (&a.namespace, &a.id);
    let row = match a.next {
        Step::Deploy => {
            let (harness, mode) = if index.is_multiple_of(2) {
                ("codex", "dedicated")
            } else {
                ("openclaw", "embedded")
            };
            c.query_one(
                "SELECT occ.agent_deploy($1, $2, 'admin', 'cfg', $3, $4, NULL, 'kubernetes', 'kubernetes',
                        p_credential_source => 'model', p_tool_sources => ARRAY['search', 'mail'],
                        p_credential_gateway_id => $5, p_sandbox_driver_id => $6,
                        p_sandbox_facets => '[\"read-only-root\"]')",
                &[ns, id, &harness, &mode, &GATEWAY, &SANDBOX],
            )
        }
        Step::Withdraw => c.query_one(
            "SELECT occ.credential_withdrawal_request('admin', $1, $2, 'search')",
            &[ns, id],
        ),
        Step::Stop => c.query_one("SELECT occ.agent_stop($1, $2, 'admin')", &[ns, id]),
        Step::Delete => c.query_one("SELECT occ.agent_delete($1, $2, 'admin')", &[ns, id]),
    };
    let v: Value = row.map_err(|e| e.to_string())?.get(0);
    match a.next {
        Step::Withdraw => v["works"][0].as_str(),
        _ => v["work"].as_str(),
    }
    .map(str::to_string)
    .ok_or_else(|| format!("no work in {v}"))
}

/// The work's state and code once it ended; `None` while it is queued or claimed. A deleted
/// Agent takes its works: a deletion ended when its Agent row is gone.
fn ended(c: &mut Client, a: &Agent, key: &str) -> Option<(String, String)> {
    let row = c
        .query_opt(
            "SELECT state::text, coalesce(reason_code::text, '-') FROM occ.work_status WHERE idempotency_key = $1::text",
            &[&key],
        )
        .unwrap();
    match row {
        Some(r) => {
            let state: String = r.get(0);
            (state != "queued" && state != "claimed").then(|| (state, r.get(1)))
        }
        None if a.next == Step::Delete => {
            let gone = count(
                c,
                &format!(
                    "SELECT count(*) FROM occ.agents WHERE id = '{}'",
                    a.id.replace('\'', "")
                ),
            ) == 0;
            gone.then(|| ("succeeded".to_string(), "AGENT_DELETED".to_string()))
        }
        None => Some(("missing".into(), "-".into())),
    }
}

/// Checks every Agent with a step in flight; an Agent whose step ended moves to its next.
fn settle(
    c: &mut Client,
    agents: &mut [Agent],
    tally: &mut Tally,
    created: &mut usize,
    delete_every: usize,
) {
    for a in agents.iter_mut() {
        let Some(key) = a.pending.clone() else {
            continue;
        };
        let Some((state, code)) = ended(c, a, &key) else {
            continue;
        };
        let step = a.next;
        *tally
            .ended
            .entry(format!("{} {state} {code}", op(step)))
            .or_insert(0) += 1;
        if state != "succeeded" {
            tally.lost.push(format!("{key} {state} {code}"));
        }
        a.pending = None;
        a.next = match step {
            Step::Deploy => Step::Withdraw,
            Step::Withdraw => Step::Stop,
            Step::Stop => {
                a.cycles += 1;
                if a.cycles.is_multiple_of(delete_every) {
                    Step::Delete
                } else {
                    Step::Deploy
                }
            }
            Step::Delete => Step::Deploy,
        };
        if step == Step::Delete && state == "succeeded" {
            // Another Agent in the deleted one's place: `a<j>-<n>`, a fresh id.
            *created += 1;
            let base = a.name.split('-').next().unwrap_or("a").to_string();
            let ns = a.namespace.clone();
            *a = create_agent(c, &ns, &format!("{base}-{created}"));
        }
    }
}

/// The objects in the fake labelled with one of `ids`, per kind.
fn owned(fake: &KubeFake, ids: &BTreeSet<String>) -> BTreeMap<&'static str, usize> {
    let mut n = BTreeMap::new();
    for plural in ALL {
        let c = fake
            .objects(plural)
            .iter()
            .filter(|o| {
                o["metadata"]["labels"][LABEL_AGENT]
                    .as_str()
                    .is_some_and(|a| ids.contains(a))
            })
            .count();
        if c > 0 {
            n.insert(plural, c);
        }
    }
    n
}

fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The smoke run under `cargo test` (and so `scripts/test`): `scripts/soak` for 24 s with this
/// program as its Kubernetes half and the test build's binary, a SIGKILL every 6 s; it fails
/// unless every verdict holds. Skipped without a Docker Engine.
fn smoke() {
    if !fleet::smoke_selected("soak_kube") {
        println!("soak_kube: the smoke run is not selected by the filter");
        return;
    }
    let docker = std::process::Command::new("docker")
        .arg("info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !docker {
        // CI (.ci/run) requires the Engine: there, no Engine fails rather than skips.
        assert!(
            std::env::var_os("OCC_REQUIRE_DOCKER").is_none(),
            "soak_kube: OCC_REQUIRE_DOCKER is set and no Docker Engine answers"
        );
        eprintln!("soak_kube: skipping the soak smoke run: no Docker Engine answers");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pid = std::process::id();
    let out = root.join(format!("target/soak-smoke-{pid}"));
    let pg = format!("target/pg-soak-smoke-{pid}");
    let me = std::env::current_exe().unwrap();
    let status = std::process::Command::new(root.join("scripts/soak"))
        .args([
            "--minutes",
            "0.4",
            "--kill-every",
            "6",
            "--restart-after",
            "1",
            "--sample-every",
            "5",
            "--warmup",
            "0",
            "--docker-every",
            "2",
            "--kube-every",
            "1",
            "--agents",
            "4",
            "--subnet-pool",
            "10.234.0.0/16:28",
            "--pg-dir",
            &pg,
        ])
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_occ-worker"))
        .arg("--kube-helper")
        .arg(&me)
        .arg("--out")
        .arg(&out)
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .status()
        .expect("run scripts/soak");
    // The workers' events and stderr go to scripts/test's capture directory for its canary
    // scan.
    if let Some(dir) = fleet::log_dir("soak") {
        for entry in std::fs::read_dir(out.join("workers")).into_iter().flatten() {
            let path = entry.expect("a worker log").path();
            if path.is_file() {
                std::fs::copy(&path, dir.join(path.file_name().unwrap()))
                    .expect("copy a worker log");
            }
        }
    }
    let _ = std::process::Command::new(root.join("scripts/pg-stop"))
        .args(["--reset", &pg])
        .current_dir(root)
        .status();
    assert_eq!(
        status.code(),
        Some(0),
        "scripts/soak smoke run: see the report above ({})",
        out.display()
    );
    let _ = std::fs::remove_dir_all(&out);
}

fn main() {
    if fleet::answered_list("soak_kube") {
        return;
    }
    if !std::env::args().any(|a| a == "--serve") {
        if std::env::args().any(|a| a == "--bench") {
            eprintln!("soak_kube: run by scripts/soak (--serve); see scripts/soak --help");
            std::process::exit(2);
        }
        smoke();
        return;
    }
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("soak_kube: {e}");
            std::process::exit(2);
        }
    };
    let admin = std::env::var("OCC_BENCH_DATABASE_URL").expect("OCC_BENCH_DATABASE_URL");
    std::fs::create_dir_all(&o.out).unwrap();
    for f in ["ready", "stop", "done", "result.json"] {
        let _ = std::fs::remove_file(o.out.join(f));
    }
    let fake = KubeFake::start(FakeOptions {
        latency: o.latency,
        pod_start: o.pod_start,
        ..FakeOptions::default()
    });
    let url = fleet::database(&admin, &o.database);
    let kubeconfig = fake.write_kubeconfig(&o.out, KubeconfigAuth::Token);
    let mut driver: Value = serde_json::from_str(DRIVER_FILE).unwrap();
    driver["qps"] = o.qps.into();
    driver["burst"] = o.burst.into();
    let driver_path = o.out.join("driver.json");
    std::fs::write(&driver_path, driver.to_string()).unwrap();
    let installation = o.out.join("installation.json");
    std::fs::write(
        &installation,
        json!({
            "sandbox": {"id": SANDBOX, "implementation": "kubernetes-sandbox",
                        "facets": ["read-only-root"]},
            "credentialGateway": {"id": GATEWAY, "implementation": "kubernetes-secret-gateway"},
        })
        .to_string(),
    )
    .unwrap();
    write(
        &o.out.join("env"),
        &format!(
            "OCC_DATABASE_URL={url}\nOCC_COMPUTE_DRIVER=kubernetes\nOCC_KUBERNETES_CONFIG={}\nKUBECONFIG={}\nOCC_INSTALLATION_CONFIG={}\n",
            driver_path.display(),
            kubeconfig.display(),
            installation.display()
        ),
    );
    write(&o.out.join("ready"), "");
    eprintln!("soak_kube: fake at {}, database {url}", fake.url());

    let mut c = Client::connect(&url, NoTls).unwrap();
    let namespaces = fleet::namespaces(&mut c, &fake, o.namespaces, "soak");
    for ns in &namespaces {
        let k8s = names::namespace_name("occ-", ns);
        c.execute(
            "SELECT occ.configuration_put($1, 'cfg', '{\"model\": \"m\"}', 'admin')",
            &[ns],
        )
        .unwrap();
        for (id, kind) in [("model", "model_key"), ("search", "tool"), ("mail", "tool")] {
            c.execute(
                "SELECT occ.credential_source_create($1, $2, $3, $4, 'credential_gateway', $5, NULL, 'admin')",
                &[ns, &id, &kind, &format!("{k8s}/{id}-secret/token"), &GATEWAY],
            )
            .unwrap();
        }
    }
    let mut agents: Vec<Agent> = (0..o.agents)
        .map(|j| create_agent(&mut c, &namespaces[j % namespaces.len()], &format!("a{j}")))
        .collect();
    let mut ids: BTreeSet<String> = BTreeSet::new();
    let mut tally = Tally::default();
    let mut created = 0usize;
    eprintln!(
        "soak_kube: {} Namespaces ready, {} Agents; load every {:?}",
        namespaces.len(),
        agents.len(),
        o.every
    );

    // The steady load: one step admitted every `every`, round robin over the idle Agents.
    let stop = o.out.join("stop");
    let mut turn = 0usize;
    let mut next = Instant::now();
    let mut last_clear = Instant::now();
    while !stop.exists() {
        for a in &agents {
            ids.insert(names::label_value(&a.id));
        }
        settle(
            &mut c,
            &mut agents,
            &mut tally,
            &mut created,
            o.delete_every,
        );
        if Instant::now() >= next {
            next += o.every;
            let idle: Vec<usize> = (0..agents.len())
                .filter(|i| agents[*i].pending.is_none())
                .collect();
            if !idle.is_empty() {
                let i = idle[turn % idle.len()];
                turn += 1;
                match admit(&mut c, &agents[i], i) {
                    Ok(key) => {
                        *tally.admitted.entry(op(agents[i].next)).or_insert(0) += 1;
                        agents[i].pending = Some(key);
                    }
                    Err(e) => {
                        // A step the admission refuses (e.g. a withdrawal after a failed
                        // deployment) is counted and the cycle moves on to a deployment.
                        *tally.refused.entry(op(agents[i].next)).or_insert(0) += 1;
                        eprintln!("soak_kube: {} refused: {e}", op(agents[i].next));
                        agents[i].next = Step::Deploy;
                    }
                }
            }
        }
        if last_clear.elapsed() > Duration::from_secs(60) {
            // The fake records every request; an hour of them is not the point here.
            fake.clear_requests();
            last_clear = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    // The end: the works in flight, then every Agent deleted, then what is left of them.
    eprintln!("soak_kube: stopping the load; waiting for the works in flight");
    let deadline = Instant::now() + Duration::from_secs(300);
    while agents.iter().any(|a| a.pending.is_some()) && Instant::now() < deadline {
        // Settling may create an Agent in a deleted one's place; it stays unused.
        settle(
            &mut c,
            &mut agents,
            &mut tally,
            &mut created,
            o.delete_every,
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for a in &mut agents {
        ids.insert(names::label_value(&a.id));
        if a.pending.is_some() {
            continue;
        }
        a.next = Step::Delete;
        match admit(&mut c, a, 0) {
            Ok(key) => {
                *tally.admitted.entry("delete").or_insert(0) += 1;
                a.pending = Some(key);
            }
            Err(e) => {
                *tally.refused.entry("delete").or_insert(0) += 1;
                eprintln!("soak_kube: final delete refused: {e}");
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while agents.iter().any(|a| a.pending.is_some()) && Instant::now() < deadline {
        for a in agents.iter_mut() {
            let Some(key) = a.pending.clone() else {
                continue;
            };
            if let Some((state, code)) = ended(&mut c, a, &key) {
                *tally
                    .ended
                    .entry(format!("delete {state} {code}"))
                    .or_insert(0) += 1;
                if state != "succeeded" {
                    tally.lost.push(format!("{key} {state} {code}"));
                }
                a.pending = None;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for a in &agents {
        if let Some(key) = &a.pending {
            tally.lost.push(format!("{key} unfinished"));
        }
    }
    // The fake's garbage collector and Pod terminations finish what a deletion started.
    let gc_deadline = Instant::now() + Duration::from_secs(60);
    while !owned(&fake, &ids).is_empty() && Instant::now() < gc_deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let left = owned(&fake, &ids);
    let result = json!({
        "agents": ids.len(),
        "admitted": tally.admitted,
        "ended": tally.ended,
        "refused": tally.refused,
        "lost": tally.lost,
        "leftObjects": left.values().sum::<usize>(),
        "leftByKind": left,
        "database": url,
    });
    write(
        &o.out.join("result.json"),
        &serde_json::to_string_pretty(&result).unwrap(),
    );
    write(&o.out.join("done"), "");
    drop(c);
    drop(fake);
}
