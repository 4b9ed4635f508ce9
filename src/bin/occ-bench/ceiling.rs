//! PostgreSQL's ceilings for the queue's work at each concurrency, each in a database of its
//! own: the bare ones, pgbench scripts on a bare queue table with the same claim shape
//! (oldest queued row, `FOR UPDATE SKIP LOCKED`, a token) and completion (by token); and the
//! worker's own, its statements run through `queue` (the files of `sql/queries/` as the worker
//! prepares them) by as many sessions, with none of the worker's threads between them. It never
//! copies or rewrites a statement of the worker's.

use crate::fixture::{
    count, deletions, fill_chunks, namespaces, step, wal_per_work, wal_position, BenchDb, LEASE,
    NOW,
};
use crate::{round, BenchError};
use occ_worker::db::Conn;
use occ_worker::queue::{self, Claim, QueueOptions};
use occ_worker::runtime::MAX_BATCH;
use postgres::Client;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The bare queue table of the pgbench ceilings (the benchmark's own, not the worker's).
const PGBENCH_SETUP: &str = "
    DROP TABLE IF EXISTS bench_q;
    CREATE TABLE bench_q (id bigserial PRIMARY KEY, state text NOT NULL DEFAULT 'queued',
                          token bigint NULL, attempts int NOT NULL DEFAULT 0,
                          lease_expires_at timestamptz NULL);
    CREATE INDEX bench_q_queued ON bench_q (id) WHERE state = 'queued';
    CREATE INDEX bench_q_claimed ON bench_q (token) WHERE state = 'claimed';";
/// Claim the oldest queued row and complete it by token, one work per statement.
const PGBENCH_SINGLE: &str = "\\set tok random(1, 9000000000000)
WITH c AS (SELECT id FROM bench_q WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
UPDATE bench_q q SET state = 'claimed', token = :tok, attempts = q.attempts + 1, lease_expires_at = clock_timestamp() + interval '30 s' FROM c WHERE q.id = c.id;
UPDATE bench_q SET state = 'done', token = NULL, lease_expires_at = NULL WHERE token = :tok AND state = 'claimed' AND lease_expires_at > clock_timestamp();
";
/// The same, ten works per statement.
const PGBENCH_BATCHED: &str = "\\set tok random(1, 9000000000000)
WITH c AS (SELECT id FROM bench_q WHERE state = 'queued' ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED)
UPDATE bench_q q SET state = 'claimed', token = :tok, attempts = q.attempts + 1, lease_expires_at = clock_timestamp() + interval '30 s' FROM c WHERE q.id = c.id;
UPDATE bench_q SET state = 'done', token = NULL, lease_expires_at = NULL WHERE token = :tok AND state = 'claimed' AND lease_expires_at > clock_timestamp();
";

/// The pgbench scripts, written into a fresh directory `occ-bench-<tag>-<pid>` under the
/// temporary directory, removed with this value.
pub struct Scripts {
    dir: PathBuf,
    pub single: PathBuf,
    pub batched: PathBuf,
}

impl Scripts {
    pub fn write(tag: &str) -> Result<Scripts, BenchError> {
        let dir = std::env::temp_dir().join(format!("occ-bench-{tag}-{}", std::process::id()));
        let scripts = Scripts {
            single: dir.join("single.sql"),
            batched: dir.join("batched.sql"),
            dir,
        };
        std::fs::create_dir_all(&scripts.dir)
            .and_then(|()| std::fs::write(&scripts.single, PGBENCH_SINGLE))
            .and_then(|()| std::fs::write(&scripts.batched, PGBENCH_BATCHED))
            .map_err(|e| BenchError::new(format!("pgbench scripts: {e}")))?;
        Ok(scripts)
    }
}

impl Drop for Scripts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Works per second at each concurrency of `levels`: the bare single-row and batched pgbench
/// scripts (`singleRow`, `batched10`), each run on a refilled table, then the worker's own
/// (`own_ceilings`).
pub fn ceilings(
    admin: &str,
    pgbench: &Path,
    levels: &[usize],
    seconds: u64,
) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, "pgbench")?;
    let scripts = Scripts::write("ceilings")?;
    let mut c = db.client()?;
    let mut out = Vec::new();
    for &clients in levels {
        let mut row = json!({"clients": clients});
        for (name, script, per) in [
            ("singleRow", &scripts.single, 1.0),
            ("batched10", &scripts.batched, 10.0),
        ] {
            let tps = bare(&mut c, &db.url, pgbench, script, clients, seconds)?.tps;
            row[name] = json!(round(tps * per, 0));
        }
        out.push(row);
    }
    // One database at a time: the bare table's goes before the worker's own are measured.
    drop(c);
    drop(db);
    for (row, [single, batched, cycle, cycle2]) in
        out.iter_mut().zip(own_ceilings(admin, levels, seconds)?)
    {
        row["occWorkSingleRow"] = json!(single);
        row["occWorkBatched10"] = json!(batched);
        row["occWorkCycle"] = json!(cycle);
        row["occWorkCycleTwoSessions"] = json!(cycle2);
    }
    Ok(Value::Array(out))
}

/// One run of a bare script (`bare`).
pub struct Bare {
    /// Transactions (works) per second.
    pub tps: f64,
    /// The cluster's WAL per work completed during the run (`fixture::wal_position`).
    pub wal_bytes_per_work: Option<f64>,
}

/// Transactions per second of `script` on the bare queue table, refilled and vacuumed first,
/// and the WAL it wrote per work.
pub fn bare(
    c: &mut Client,
    url: &str,
    pgbench: &Path,
    script: &Path,
    clients: usize,
    seconds: u64,
) -> Result<Bare, BenchError> {
    c.batch_execute(PGBENCH_SETUP)
        .map_err(step("pgbench setup"))?;
    c.batch_execute("INSERT INTO bench_q (state) SELECT 'queued' FROM generate_series(1, 600000)")
        .map_err(step("pgbench fill"))?;
    c.batch_execute("VACUUM ANALYZE bench_q")
        .map_err(step("pgbench fill"))?;
    let wal_before = wal_position(c)?;
    let tps = pgbench_tps(pgbench, script, clients, seconds, url)?;
    let wal_after = wal_position(c)?;
    let done = count(c, "SELECT count(*) FROM bench_q WHERE state = 'done'")?;
    if done as f64 >= 590_000.0 {
        return Err(BenchError::new(
            "pgbench drained its whole table: raise the fill",
        ));
    }
    Ok(Bare {
        tps,
        wal_bytes_per_work: wal_per_work(wal_before, wal_after, done),
    })
}

/// Transactions per second of one pgbench run of `script` (prepared statements, `clients`
/// sessions, at most four threads).
fn pgbench_tps(
    pgbench: &Path,
    script: &Path,
    clients: usize,
    seconds: u64,
    url: &str,
) -> Result<f64, BenchError> {
    let output = std::process::Command::new(pgbench)
        .args(["-n", "-M", "prepared", "-T", &seconds.to_string()])
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            &clients.min(4).to_string(),
        ])
        .arg("-f")
        .arg(script)
        .arg(url)
        .output()
        .map_err(|e| BenchError::new(format!("pgbench: {e}")))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("aborted") || !output.status.success() {
        return Err(BenchError::new(format!(
            "pgbench failed: {}",
            stderr.lines().next().unwrap_or("")
        )));
    }
    text.lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l["tps = ".len()..].split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| BenchError::new("pgbench gave no tps"))
}

/// What a session of the worker's own ceilings runs, over and over.
#[derive(Clone, Copy)]
enum Own {
    /// Claims up to this many works (`queue::work_claim_batch`), then completes them in one
    /// statement (`queue::work_complete_batch`), each statement its own transaction.
    ClaimThenComplete(usize),
    /// A publisher's cycle claiming up to this many works: the claims of the previous cycle
    /// locked in the message that begins the transaction (`queue::work_begin_locking_claims`),
    /// then completed with the next claim and the commit in one message
    /// (`queue::work_commit_completing_and_claiming`): two round trips.
    Cycle(usize),
}

/// Works per second of the worker's own statements on `occ.work` at each concurrency, each
/// run on fresh works in 1,000 lanes: `clients` sessions claiming one work and completing it
/// (20,000 works), `clients` sessions doing so ten at a time (100,000), the publication
/// cycle of that concurrency (at most `MAX_BATCH` works) in one session (100,000), and in two
/// sessions of half as many works each, as the worker's two publishers share the pool from
/// concurrency 16 (100,000).
fn own_ceilings(admin: &str, levels: &[usize], seconds: u64) -> Result<Vec<[f64; 4]>, BenchError> {
    let db = BenchDb::create(admin, "ownceilings")?;
    let mut c = db.client()?;
    namespaces(&mut c, "n", 1000)?;
    let mut out = Vec::new();
    let mut run = 0;
    for &clients in levels {
        let half = clients.div_ceil(2).min(MAX_BATCH);
        let mut rates = [0.0; 4];
        for (i, (own, sessions, fill)) in [
            (Own::ClaimThenComplete(1), clients, 20_000),
            (Own::ClaimThenComplete(10), clients, 100_000),
            (Own::Cycle(clients.min(MAX_BATCH)), 1, 100_000),
            (Own::Cycle(half), 2, 100_000),
        ]
        .into_iter()
        .enumerate()
        {
            // At most 100 keys per lane and run: `first` moves on by 100.
            fill_chunks(&mut c, fill, "own ceilings fill", |lo, hi| {
                deletions("n", 1000, run * 100 + 1, lo, hi, NOW)
            })?;
            run += 1;
            c.batch_execute("ANALYZE occ.work; ANALYZE occ.work_lanes")
                .map_err(step("analyze"))?;
            rates[i] = own_rate(&db.url, own, sessions, seconds)?;
            let left = count(
                &mut c,
                "SELECT count(*) FROM occ.work WHERE state = 'queued'",
            )?;
            if left == 0 {
                return Err(BenchError::new(
                    "the own ceilings drained all of occ.work: raise the fill",
                ));
            }
            // The works left, claimed or not, leave the queue (ending their claims).
            c.batch_execute(
                "UPDATE occ.work SET state = 'succeeded', reason_code = 'DONE',
                     completed_at = clock_timestamp()
                 WHERE state = 'queued'",
            )
            .map_err(step("own ceilings reset"))?;
        }
        out.push(rates.map(|r| round(r, 0)));
    }
    Ok(out)
}

/// Works completed per second by `sessions` sessions running `own` for `seconds`, each on a
/// connection of its own with the worker's session settings (`db::connect`) and its statement
/// cache (`db::Conn`), connected before the clock starts.
fn own_rate(url: &str, own: Own, sessions: usize, seconds: u64) -> Result<f64, BenchError> {
    let conns = (0..sessions)
        .map(|_| {
            Ok(Conn::new(occ_worker::db::connect(
                url,
                crate::fixture::TIMEOUT,
            )?))
        })
        .collect::<Result<Vec<_>, BenchError>>()?;
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let threads: Vec<_> = conns
        .into_iter()
        .map(|mut conn| std::thread::spawn(move || own_session(&mut conn, own, until)))
        .collect();
    let mut works = 0;
    for thread in threads {
        works += thread
            .join()
            .map_err(|_| BenchError::new("an own-ceiling session panicked"))??;
    }
    Ok(works as f64 / started.elapsed().as_secs_f64())
}

/// One session of `own_rate` until `until`: the works it completed. It stops early when
/// nothing is left to claim.
fn own_session(conn: &mut Conn, own: Own, until: Instant) -> Result<u64, BenchError> {
    let options = QueueOptions::new(LEASE, 5);
    let mut works = 0;
    // The cycle's claims, completed by the next cycle.
    let mut held: Vec<Claim> = Vec::new();
    while Instant::now() < until {
        let (completed, claimed) = match own {
            Own::ClaimThenComplete(limit) => {
                let claims = queue::work_claim_batch(conn, &options, limit)?;
                let done: Vec<_> = claims.iter().map(|c| (c, "DONE", None)).collect();
                if !done.is_empty() {
                    queue::work_complete_batch(conn, &done)?;
                }
                (claims.len(), claims.len())
            }
            Own::Cycle(limit) => {
                let previous: Vec<&Claim> = held.iter().collect();
                let (tx, live) = queue::work_begin_locking_claims(conn, &previous)?;
                if live.len() != previous.len() {
                    return Err(BenchError::new("an own-ceiling cycle lost a claim"));
                }
                let done: Vec<_> = previous.iter().map(|c| (*c, "DONE", None)).collect();
                let next = queue::work_commit_completing_and_claiming(tx, &done, &options, limit)??;
                let completed = held.len();
                held = next;
                (completed, held.len())
            }
        };
        works += completed as u64;
        if claimed == 0 {
            break;
        }
    }
    Ok(works)
}
