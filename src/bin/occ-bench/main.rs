//! `occ-bench`, the queue benchmark (run it through `scripts/bench-queue`;
//! docs/benchmarks.md says what each figure means). It is test tooling: it creates and drops
//! databases, so it is a binary of its own, built only with the `test-tooling` feature, and
//! neither `occ-worker` nor the image contains it.
//!
//! Each measurement runs in a fresh database created from the admin URL, migrated and
//! bootstrapped, and dropped afterwards (`fixture`): PostgreSQL's ceilings for the queue's
//! work (`ceiling`); drain throughput with the `Noop` reconciler at several concurrencies, the
//! drain paired with the bare ceiling measured right before it, enqueue-to-claim latency on an
//! idle worker and an idle worker process's CPU and RSS (`worker`); the claim's cost as the
//! table changes around it (`claim`); and admission throughput with wake-ups on and off
//! (`admission`); and one queue drained by several worker processes against one process with
//! as many threads (`scale_out`). It runs the worker's statements only through the library
//! (`queue`, `runtime::Worker`), never a copy or a rewrite of them, and never touches
//! infrastructure: its Compute Driver refuses every call (the scale-out's Namespace load has a
//! scripted one of its own that reaches nothing).

mod admission;
mod ceiling;
mod claim;
mod fixture;
mod scale_out;
mod worker;

use clap::Parser;
use serde_json::{json, Map, Value};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "occ-bench",
    about = "The queue benchmark (run it through scripts/bench-queue)"
)]
struct Args {
    /// Print one JSON report instead of a line per measurement.
    #[arg(long)]
    json: bool,
    /// PostgreSQL connection string of a user who may create databases; each measurement
    /// creates its own and drops it.
    #[arg(long, env = "OCC_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Works drained per concurrency level.
    #[arg(long, default_value_t = 20_000)]
    works: i64,
    /// Concurrency levels of the drain measurement.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    concurrency: Vec<usize>,
    /// Single works of the latency measurement.
    #[arg(long, default_value_t = 200)]
    latency_samples: usize,
    /// Terminal rows of the large table in the claim-cost measurement.
    #[arg(long, default_value_t = 1_000_000)]
    terminal_rows: i64,
    /// Claim+complete cycles per table size in the claim-cost measurement.
    #[arg(long, default_value_t = 500)]
    cycles: usize,
    /// Queued works behind the heads of 100 busy lanes.
    #[arg(long, default_value_t = 100_000)]
    backlog: i64,
    /// Works completed before the claim is measured again, without a manual vacuum.
    #[arg(long, default_value_t = 200_000)]
    completed: i64,
    /// Future-dated works in the table while the claim is measured.
    #[arg(long, default_value_t = 100_000)]
    future: i64,
    /// Seconds of each admission run (16 sessions calling `occ.namespace_create`).
    #[arg(long, default_value_t = 10)]
    admission_seconds: u64,
    /// Seconds the idle worker process is watched.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Seconds of each ceiling run.
    #[arg(long, default_value_t = 5)]
    pgbench_seconds: u64,
    /// Drains at each of these concurrencies paired with the bare single-row ceiling measured
    /// right before each (the `paired` measurement).
    #[arg(long, value_delimiter = ',', default_value = "16")]
    paired_concurrency: Vec<usize>,
    /// Pairs per concurrency of the `paired` measurement.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// The pgbench binary (found on PATH when absent); no ceilings without one.
    #[arg(long)]
    pgbench: Option<PathBuf>,
    /// Which measurements to run (all by default).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = ["ceilings", "drain", "paired", "latency", "claim", "admission", "idle", "scale-out"],
        default_value = "ceilings,drain,paired,latency,claim,admission,idle,scale-out"
    )]
    only: Vec<String>,
    /// Works per drain of the `scale-out` measurement (each load).
    #[arg(long, default_value_t = 20_000)]
    scale_out_works: i64,
    /// Layouts of the `scale-out` measurement, PROCESSESxTHREADS; the first is the yardstick
    /// each other's ratio is taken to.
    #[arg(long, value_delimiter = ',', default_value = "1x24,3x8,6x4")]
    scale_out: Vec<scale_out::Layout>,
    /// Loads of the `scale-out` measurement.
    #[arg(long, value_delimiter = ',', value_parser = scale_out::LOADS, default_value = "noop,namespaces")]
    scale_out_loads: Vec<String>,
    /// Rounds of the `scale-out` measurement: each round drains once with every layout in
    /// turn; the figure is the median of the rounds' ratios.
    #[arg(long, default_value_t = 3)]
    scale_out_rounds: usize,
    /// Internal: run an idle worker against this database for the idle measurement's child.
    #[arg(long, hide = true)]
    idle_child: Option<String>,
    /// Internal: run a worker against this database for the scale-out measurement's child.
    #[arg(long, hide = true)]
    worker_child: Option<String>,
    /// Internal: the scale-out child's load (noop | namespaces).
    #[arg(long, hide = true, default_value = "noop")]
    child_load: String,
    /// Internal: the scale-out child's threads.
    #[arg(long, hide = true, default_value_t = 8)]
    child_threads: usize,
}

/// A failed measurement, as one line.
#[derive(Debug)]
pub struct BenchError(String);

impl BenchError {
    pub fn new(message: impl Into<String>) -> BenchError {
        BenchError(message.into())
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.replace('\n', " "))
    }
}

/// Any error becomes its whole chain on one line (`db::error_chain`).
impl<E: std::error::Error> From<E> for BenchError {
    fn from(e: E) -> BenchError {
        BenchError::new(occ_worker::db::error_chain(&e))
    }
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("occ-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), BenchError> {
    if let Some(url) = &args.idle_child {
        return worker::idle_child(url);
    }
    if let Some(url) = &args.worker_child {
        return scale_out::child(url, &args.child_load, args.child_threads);
    }
    let admin = args
        .database_url
        .clone()
        .ok_or_else(|| BenchError::new("OCC_DATABASE_URL is required (or --database-url)"))?;
    let wants = |what: &str| args.only.iter().any(|o| o == what);
    let text = !args.json;
    let pgbench = find_pgbench(args.pgbench.clone());
    let mut report = Map::new();
    let durability = fixture::durability(&admin)?;
    if text {
        println!("server: {durability}");
    }
    report.insert("durability".into(), durability);
    if wants("ceilings") {
        ceilings(&args, &admin, pgbench.as_deref(), text, &mut report)?;
    }
    if wants("drain") {
        let drains = drains(&args, &admin, report.get("ceilings"), text)?;
        report.insert("drain".into(), drains);
    }
    if wants("paired") && args.pairs > 0 {
        paired(&args, &admin, pgbench.as_deref(), text, &mut report)?;
    }
    if wants("latency") {
        let latency = worker::latency(&admin, args.latency_samples)?;
        if text {
            print_latency(&latency);
        }
        report.insert("latency".into(), latency);
    }
    if wants("claim") {
        claims(&args, &admin, text, &mut report)?;
    }
    if wants("admission") {
        admission(&args, &admin, text, &mut report)?;
    }
    if wants("idle") {
        idle(&args, &admin, text, &mut report)?;
    }
    if wants("scale-out") && args.scale_out_rounds > 0 && !args.scale_out.is_empty() {
        scale(&args, &admin, text, &mut report)?;
    }
    if args.json {
        println!("{}", Value::Object(report));
    }
    Ok(())
}

/// The `ceilings` measurement into `report`, when there is a pgbench to run.
fn ceilings(
    args: &Args,
    admin: &str,
    pgbench: Option<&Path>,
    text: bool,
    report: &mut Map<String, Value>,
) -> Result<(), BenchError> {
    let Some(pgbench) = pgbench else {
        if text {
            println!("pgbench: not found, no ceilings");
        }
        return Ok(());
    };
    let ceilings = ceiling::ceilings(admin, pgbench, &args.concurrency, args.pgbench_seconds)?;
    if text {
        print_ceilings(&ceilings);
    }
    report.insert("ceilings".into(), ceilings);
    Ok(())
}

/// The `paired` measurement into `report`, when there is a pgbench to run.
fn paired(
    args: &Args,
    admin: &str,
    pgbench: Option<&Path>,
    text: bool,
    report: &mut Map<String, Value>,
) -> Result<(), BenchError> {
    let Some(pgbench) = pgbench else {
        if text {
            println!("pgbench: not found, no paired drains");
        }
        return Ok(());
    };
    let pairs = worker::paired(
        admin,
        pgbench,
        &args.paired_concurrency,
        args.pgbench_seconds,
        args.works,
        args.pairs,
    )?;
    if text {
        print_pairs(&pairs);
    }
    report.insert("paired".into(), pairs);
    Ok(())
}

fn print_ceilings(ceilings: &Value) {
    for r in ceilings.as_array().into_iter().flatten() {
        println!(
            "ceiling clients={:<3} pgbench on a bare table: single-row claim+complete works/s={} batched (10/statement) works/s={}; the worker's own statements on occ.work, one work per claim works/s={} ten per claim works/s={}; the publishers' cycle of that many works, one session, works/s={}, two sessions of half as many each, works/s={}",
            r["clients"], r["singleRow"], r["batched10"], r["occWorkSingleRow"], r["occWorkBatched10"], r["occWorkCycle"], r["occWorkCycleTwoSessions"]
        );
    }
}

/// The ceilings a drain is printed next to: the ceiling's key, the drain's key for it, and
/// how the line names it.
const DRAIN_CEILINGS: [(&str, &str, &str); 6] = [
    ("singleRow", "ceilingSingleRow", "single-row ceiling"),
    ("batched10", "ceilingBatched", "batched ceiling"),
    ("occWorkSingleRow", "ceilingOccWork", "occ.work statements"),
    ("occWorkBatched10", "ceilingOccWorkBatched", "batched"),
    (
        "occWorkCycle",
        "ceilingOccWorkCycle",
        "the publishers' cycle",
    ),
    (
        "occWorkCycleTwoSessions",
        "ceilingOccWorkCycleTwoSessions",
        "in two sessions",
    ),
];

/// The drain at each `--concurrency`, each next to the ceilings measured at that concurrency
/// (when they were) and its ratio to each.
fn drains(
    args: &Args,
    admin: &str,
    ceilings: Option<&Value>,
    text: bool,
) -> Result<Value, BenchError> {
    let ceiling_at = |clients: usize, which: &str| -> Option<f64> {
        ceilings?
            .as_array()?
            .iter()
            .find(|r| r["clients"].as_u64() == Some(clients as u64))?[which]
            .as_f64()
            .filter(|v| *v > 0.0)
    };
    let mut drains = Vec::new();
    for &c in &args.concurrency {
        let mut r = worker::drain(admin, args.works, c)?;
        let wps = r["worksPerSecond"].as_f64().unwrap_or(0.0);
        let mut next_to = Vec::new();
        for (which, key, name) in DRAIN_CEILINGS {
            if let Some(ceiling) = ceiling_at(c, which) {
                let ratio = round(wps / ceiling, 2);
                r[key] = json!(ceiling);
                r[format!("{key}Ratio")] = json!(ratio);
                next_to.push(format!("{name} {ceiling} ratio {ratio}"));
            }
        }
        if text {
            let ceilings = if next_to.is_empty() {
                String::new()
            } else {
                format!(" ({})", next_to.join("; "))
            };
            println!(
                "drain   concurrency={:<3} works={} seconds={} works/s={} CPU ms/work: machine {} worker {}; WAL bytes/work {}{ceilings}",
                c, r["works"], r["seconds"], r["worksPerSecond"], r["machineCpuMsPerWork"], r["workerCpuMsPerWork"], r["walBytesPerWork"],
            );
        }
        drains.push(r);
    }
    Ok(Value::Array(drains))
}

fn print_pairs(pairs: &Value) {
    for p in pairs.as_array().into_iter().flatten() {
        let runs: Vec<String> = p["pairs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                format!(
                    "{} -> {} ({}; WAL bytes/work {} -> {})",
                    r["ceilingSingleRow"],
                    r["worksPerSecond"],
                    r["ratio"],
                    r["ceilingWalBytesPerWork"],
                    r["walBytesPerWork"]
                )
            })
            .collect();
        println!(
            "paired  concurrency={:<3} single-row ceiling -> drain works/s (ratio; WAL per work), each pair side by side: {}; median ratio {}",
            p["concurrency"],
            runs.join(", "),
            p["medianRatio"]
        );
    }
}

fn print_latency(lat: &Value) {
    println!(
        "latency enqueue->claim, idle worker, poll 250 ms: samples={} p50={} ms p99={} ms max={} ms (from the enqueue's commit: p50={} ms p99={} ms); a lone pass's report handed over -> its publication under way: p50={} ms p99={} ms",
        lat["samples"], lat["p50Ms"], lat["p99Ms"], lat["maxMs"], lat["p50FromCommitMs"], lat["p99FromCommitMs"], lat["p50HandOverToPublishMs"], lat["p99HandOverToPublishMs"]
    );
}

/// The `claim` measurements, each into `report`.
fn claims(
    args: &Args,
    admin: &str,
    text: bool,
    report: &mut Map<String, Value>,
) -> Result<(), BenchError> {
    let cost = claim::cost(admin, 1_000, args.terminal_rows, args.cycles)?;
    let probe = |p: &Value| {
        format!(
            "claim p50={} ms p99={} ms, cycle {} ms, EXPLAIN {} ms, {} buffers hit",
            p["claimP50Ms"],
            p["claimP99Ms"],
            p["cycleMs"],
            p["explain"]["executionMs"],
            p["explain"]["sharedHit"]
        )
    };
    if text {
        for r in cost.as_array().into_iter().flatten() {
            println!("claim   rows={:<8} {}", r["rows"], probe(r));
        }
    }
    report.insert("claimCost".into(), cost);
    let busy = claim::busy_lanes(admin, args.backlog, args.cycles)?;
    let after = claim::after_completions(admin, args.completed, args.cycles)?;
    let future = claim::with_future(admin, args.future, args.cycles)?;
    if text {
        println!(
            "claim   100 busy lanes, 0 queued: {}",
            probe(&busy["queued0"])
        );
        println!(
            "claim   100 busy lanes, {} queued behind them: {} (ratio {})",
            busy["queuedBacklog"]["queued"],
            probe(&busy["queuedBacklog"]["probe"]),
            busy["ratio"]
        );
        println!("claim   fresh table: {}", probe(&after["fresh"]));
        println!(
            "claim   right after {} completions, no manual vacuum: {} (ratio {})",
            after["afterCompleted"]["completed"],
            probe(&after["afterCompleted"]["probe"]),
            after["ratio"]
        );
        println!("claim   fresh table: {}", probe(&future["fresh"]));
        println!(
            "claim   with {} future-dated works: {} (ratio {})",
            future["futureDated"]["works"],
            probe(&future["futureDated"]["probe"]),
            future["ratio"]
        );
    }
    report.insert("claimBusyLanes".into(), busy);
    report.insert("claimAfterCompletions".into(), after);
    report.insert("claimFutureDated".into(), future);
    Ok(())
}

/// The `admission` measurement into `report`.
fn admission(
    args: &Args,
    admin: &str,
    text: bool,
    report: &mut Map<String, Value>,
) -> Result<(), BenchError> {
    let adm = admission::admission(admin, args.admission_seconds)?;
    if text {
        println!(
            "admission occ.namespace_create, 16 sessions: wake-ups on {}/s, off {}/s (ratio {})",
            adm["wakeupsOnPerSecond"], adm["wakeupsOffPerSecond"], adm["ratio"]
        );
    }
    report.insert("admission".into(), adm);
    Ok(())
}

/// The `idle` measurement into `report`.
fn idle(
    args: &Args,
    admin: &str,
    text: bool,
    report: &mut Map<String, Value>,
) -> Result<(), BenchError> {
    let idle = worker::idle(admin, args.idle_seconds)?;
    if text {
        println!(
            "idle    worker process, concurrency 16, {} s: CPU {} % ({} s), max RSS {} MiB",
            idle["seconds"], idle["cpuPercent"], idle["cpuSeconds"], idle["maxRssMiB"]
        );
    }
    report.insert("idle".into(), idle);
    Ok(())
}

/// The `scale-out` measurement into `report`.
fn scale(
    args: &Args,
    admin: &str,
    text: bool,
    report: &mut Map<String, Value>,
) -> Result<(), BenchError> {
    let scale = scale_out::scale_out(
        admin,
        &args.scale_out_loads,
        args.scale_out_works,
        &args.scale_out,
        args.scale_out_rounds,
    )?;
    if text {
        for load in scale.as_array().into_iter().flatten() {
            let layouts: Vec<String> = load["layouts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| {
                    let cpu: Vec<String> = l["runs"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| {
                            format!(
                                "{}={}+{}/{}",
                                r["queueCpuMsPerWork"],
                                r["processesCpuMsPerWork"],
                                r["sessionsCpuMsPerWork"],
                                r["machineCpuMsPerWork"]
                            )
                        })
                        .collect();
                    format!(
                        "{} works/s {} (ratio to the first {}; median {}; CPU ms/work, processes and their sessions=processes+sessions/machine [{}])",
                        l["layout"].as_str().unwrap_or_default(),
                        l["worksPerSecond"],
                        l["ratios"],
                        l["medianRatio"],
                        cpu.join(",")
                    )
                })
                .collect();
            println!(
                "scale-out load={} works={} a drain, each exactly once: {}",
                load["load"].as_str().unwrap_or_default(),
                load["works"],
                layouts.join("; ")
            );
        }
    }
    report.insert("scaleOut".into(), scale);
    Ok(())
}

/// The pgbench binary: `--pgbench`, else `pgbench` on PATH, else the newest server's.
fn find_pgbench(given: Option<PathBuf>) -> Option<PathBuf> {
    if given.is_some() {
        return given;
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("pgbench"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin/pgbench")))
            .filter(|p| p.is_file())
            .collect();
        dirs.sort();
        dirs.pop()
    })
}

/// The `p`th percentile of `sorted` (nearest rank); 0 for none.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `v` rounded to `places` decimal places.
pub fn round(v: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (v * f).round() / f
}

/// The median of `values` (the mean of the middle two for an even count, to two places).
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => None,
        n if n % 2 == 1 => Some(values[n / 2]),
        n => Some(round((values[n / 2 - 1] + values[n / 2]) / 2.0, 2)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paired_ratio_is_the_median_of_the_pairs() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![0.89, 0.83, 0.88, 0.85, 0.89]), Some(0.88));
        assert_eq!(median(vec![0.9, 0.7, 0.8, 1.0]), Some(0.85));
    }

    #[test]
    fn a_percentile_is_the_nearest_rank() {
        let sorted: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&sorted, 50.0), 50);
        assert_eq!(percentile(&sorted, 99.0), 99);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn the_arguments_parse() {
        use clap::CommandFactory;
        Args::command().debug_assert();
        let args = Args::try_parse_from(["occ-bench", "--only", "drain,paired"]).unwrap();
        assert_eq!(args.only, ["drain", "paired"]);
        assert!(Args::try_parse_from(["occ-bench", "--only", "drains"]).is_err());
        let args = Args::try_parse_from(["occ-bench", "--only", "scale-out", "--scale-out", "2x3"])
            .unwrap();
        assert_eq!(args.scale_out.len(), 1);
        assert_eq!(args.scale_out[0].to_string(), "2x3");
    }
}
