//! The claim's cost as the table changes around it: timed claim+complete cycles of single
//! works through `queue` (`probe`), with few and many terminal rows (`cost`), with a backlog
//! queued behind busy lanes (`busy_lanes`), right after a burst of completions
//! (`after_completions`) and with future-dated works (`with_future`), each against a fresh
//! table; and the claim's plan as the worker's sessions run it (`explain`). Its claims and
//! completions go through `queue`; it never runs a variant of the claim.

use crate::fixture::{count, deletions, fill_chunks, namespaces, step, BenchDb, LEASE, NOW};
use crate::{percentile, round, BenchError};
use occ_worker::queue::{self, NewWork, QueueOptions};
use postgres::Client;
use serde_json::{json, Value};
use std::time::Instant;

/// The worker's claim statement, prepared as it is (`explain`).
const CLAIM: &str = include_str!("../../../sql/queries/work_claim.sql");

/// The claim with `small` and then `large` terminal rows in the table.
pub fn cost(admin: &str, small: i64, large: i64, cycles: usize) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, "claimcost")?;
    let mut c = db.client()?;
    namespaces(&mut c, "n", 1000)?;
    let mut results = Vec::new();
    let mut have = 0;
    for target in [small, large] {
        let fill = Instant::now();
        c.batch_execute(&format!(
            "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id,
                 state, attempt_count, reason_code, completed_at)
             SELECT format('namespace:n%s:delete:%s', i % 1000 + 1, i / 1000 + 1),
                    'n' || (i % 1000 + 1), 'deleted', 'admin', 'succeeded', 1, 'DONE', now()
             FROM generate_series({have}, {target} - 1) i"
        ))
        .map_err(step("claim-cost fill"))?;
        c.batch_execute("VACUUM ANALYZE occ.work")
            .map_err(step("vacuum"))?;
        let fill_seconds = fill.elapsed().as_secs_f64();
        have = target;
        let mut r = probe(&mut c, cycles)?;
        r["rows"] = json!(count(&mut c, "SELECT count(*) FROM occ.work")?);
        r["fillSeconds"] = json!(round(fill_seconds, 1));
        results.push(r);
    }
    Ok(Value::Array(results))
}

/// Timed claim+complete cycles of single works in a free lane (`probe`, a Namespace of its
/// own), the claim asking for up to 16 works as a worker with 16 free slots does; then the
/// claim's plan with buffers while one work is claimable.
fn probe(c: &mut Client, cycles: usize) -> Result<Value, BenchError> {
    c.batch_execute(
        "INSERT INTO occ.namespaces_all (id, name, status, created_by)
         VALUES ('probe', 'probe', 'ready', 'admin') ON CONFLICT DO NOTHING",
    )
    .map_err(step("claim probe setup"))?;
    let base: i64 = count(
        c,
        "SELECT count(*) FROM occ.work WHERE namespace_id = 'probe'",
    )?;
    let opts = QueueOptions::new(LEASE, 5);
    let mut claim_us = Vec::with_capacity(cycles);
    let started = Instant::now();
    for n in 0..cycles as i64 {
        let work = NewWork::namespace_delete("probe", Some((base + n + 1) as u32), "admin");
        queue::work_enqueue(c, &work)?;
        let t = Instant::now();
        let claims = queue::work_claim_batch(c, &opts, 16)?;
        claim_us.push(t.elapsed().as_micros() as u64);
        let [claim] = claims.as_slice() else {
            return Err(BenchError::new(format!(
                "claim probe: expected the probe's one work, claimed {}",
                claims.len()
            )));
        };
        queue::work_complete(c, claim, "DONE", None)?;
    }
    let cycle_ms = started.elapsed().as_secs_f64() * 1000.0 / cycles.max(1) as f64;
    claim_us.sort_unstable();
    queue::work_enqueue(
        c,
        &NewWork::namespace_delete("probe", Some((base + cycles as i64 + 1) as u32), "admin"),
    )?;
    let plan = explain(c)?;
    Ok(json!({
        "cycles": cycles,
        "cycleMs": round(cycle_ms, 3),
        "claimP50Ms": round(percentile(&claim_us, 50.0) as f64 / 1000.0, 3),
        "claimP99Ms": round(percentile(&claim_us, 99.0) as f64 / 1000.0, 3),
        "explain": plan,
    }))
}

/// `p50 after / p50 before`, the ratio the claim measurements report.
fn ratio(after: &Value, before: &Value) -> f64 {
    let a = after["claimP50Ms"].as_f64().unwrap_or(0.0);
    let b = before["claimP50Ms"].as_f64().unwrap_or(0.0);
    if b > 0.0 {
        round(a / b, 2)
    } else {
        0.0
    }
}

/// The claim with no queued work, then with `backlog` works queued behind the claimed heads
/// of 100 busy lanes (Q4).
pub fn busy_lanes(admin: &str, backlog: i64, cycles: usize) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, "busylanes")?;
    let mut c = db.client()?;
    namespaces(&mut c, "b", 100)?;
    c.batch_execute(
        "INSERT INTO occ.work (idempotency_key, namespace_id, namespace_target, actor_id)
         SELECT format('namespace:b%s:delete', l), 'b' || l, 'deleted', 'admin'
         FROM generate_series(1, 100) l",
    )
    .map_err(step("busy lanes"))?;
    let heads = queue::work_claim_batch(&mut c, &QueueOptions::new(LEASE * 100, 5), 100)?;
    if heads.len() != 100 {
        return Err(BenchError::new(
            "busy lanes: the 100 heads were not all claimed",
        ));
    }
    c.batch_execute("ANALYZE occ.work; ANALYZE occ.work_lanes")
        .map_err(step("analyze"))?;
    let before = probe(&mut c, cycles)?;
    let per_lane = (backlog / 100).max(1);
    let fill = Instant::now();
    fill_chunks(&mut c, per_lane * 100, "busy-lane backlog", |lo, hi| {
        deletions("b", 100, 1, lo, hi, NOW)
    })?;
    c.batch_execute("ANALYZE occ.work; ANALYZE occ.work_lanes")
        .map_err(step("analyze"))?;
    let fill_seconds = fill.elapsed().as_secs_f64();
    let after = probe(&mut c, cycles)?;
    Ok(json!({
        "busyLanes": 100,
        "queued0": before,
        "queuedBacklog": {"queued": per_lane * 100, "fillSeconds": round(fill_seconds, 1), "probe": after},
        "ratio": ratio(&after, &before),
    }))
}

/// The claim in a fresh table, then right after `completed` works were claimed and completed
/// (in batches of 1,000, through the worker's own statements), before any manual vacuum.
pub fn after_completions(admin: &str, completed: i64, cycles: usize) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, "completed")?;
    let mut c = db.client()?;
    namespaces(&mut c, "n", 1000)?;
    let before = probe(&mut c, cycles)?;
    let fill = Instant::now();
    fill_chunks(&mut c, completed, "completions fill", |lo, hi| {
        deletions("n", 1000, 1, lo, hi, NOW)
    })?;
    let opts = QueueOptions::new(LEASE, 5);
    let mut done = 0i64;
    loop {
        let claims = queue::work_claim_batch(&mut c, &opts, 1000)?;
        if claims.is_empty() {
            break;
        }
        let mut tx = c.transaction()?;
        for claim in &claims {
            queue::work_complete(&mut tx, claim, "DONE", None)?;
        }
        tx.commit()?;
        done += claims.len() as i64;
    }
    let drain_seconds = fill.elapsed().as_secs_f64();
    let after = probe(&mut c, cycles)?;
    Ok(json!({
        "fresh": before,
        "afterCompleted": {"completed": done, "seconds": round(drain_seconds, 1), "probe": after},
        "ratio": ratio(&after, &before),
    }))
}

/// The claim in a fresh table, then with `future` works due in an hour or more, spread over
/// 10,000 lanes (Q4).
pub fn with_future(admin: &str, future: i64, cycles: usize) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, "future")?;
    let mut c = db.client()?;
    namespaces(&mut c, "f", 10_000)?;
    let before = probe(&mut c, cycles)?;
    let fill = Instant::now();
    fill_chunks(&mut c, future, "future fill", |lo, hi| {
        deletions(
            "f",
            10_000,
            1,
            lo,
            hi,
            "clock_timestamp() + interval '1 hour' + i * interval '1 ms'",
        )
    })?;
    c.batch_execute("ANALYZE occ.work; ANALYZE occ.work_lanes")
        .map_err(step("analyze"))?;
    let fill_seconds = fill.elapsed().as_secs_f64();
    let after = probe(&mut c, cycles)?;
    Ok(json!({
        "fresh": before,
        "futureDated": {"works": future, "fillSeconds": round(fill_seconds, 1), "probe": after},
        "ratio": ratio(&after, &before),
    }))
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of the claim of up to 16 works with a 30 s lease, rolled
/// back: its execution time and buffers. The claim is the worker's file as is, prepared and
/// executed as the worker's sessions run it (their planner settings: a generic plan).
fn explain(c: &mut Client) -> Result<Value, BenchError> {
    c.batch_execute(&format!("PREPARE occ_bench_claim AS {CLAIM}"))
        .map_err(step("explain"))?;
    let mut tx = c.transaction()?;
    let plan: Value = tx
        .query_one(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE occ_bench_claim(30000, 16, \
             '6d1f5a3c-8a4e-4b7e-9c1d-2f3a4b5c6d7e', 'occ-bench', 1)",
            &[],
        )
        .map_err(step("explain"))?
        .get(0);
    tx.rollback()?;
    c.batch_execute("DEALLOCATE occ_bench_claim")
        .map_err(step("explain"))?;
    let top = &plan[0];
    let node = &top["Plan"];
    Ok(json!({
        "executionMs": top["Execution Time"],
        "sharedHit": node["Shared Hit Blocks"],
        "sharedRead": node["Shared Read Blocks"],
    }))
}
