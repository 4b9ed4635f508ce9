//! Admission throughput with wake-ups on and off: `occ.namespace_create` from 16 sessions
//! while a LISTEN session is connected (Q13), the wake-up trigger enabled or disabled. No
//! worker runs: only the cost of the wake-ups to admission is measured.

use crate::fixture::{step, BenchDb, TIMEOUT};
use crate::{round, BenchError};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// `occ.namespace_create` from 16 sessions for `seconds` per run, with the wake-up trigger
/// on and off, in the order off, on, on, off, so a drift over the measurement (a table and
/// its indexes growing, the first run's cold start) weighs on both alike; each figure is the
/// mean of its two runs.
pub fn admission(admin: &str, seconds: u64) -> Result<Value, BenchError> {
    let db = BenchDb::create(admin, "admission")?;
    let mut listener = db.client()?;
    listener
        .batch_execute("LISTEN occ_work")
        .map_err(step("listen"))?;
    let (mut on, mut off) = (0.0, 0.0);
    for (round, wakeups) in [(0, false), (1, true), (2, true), (3, false)] {
        db.client()?
            .batch_execute(if wakeups {
                "ALTER TABLE occ.work ENABLE TRIGGER work_notify"
            } else {
                "ALTER TABLE occ.work DISABLE TRIGGER work_notify"
            })
            .map_err(step("wake-up trigger"))?;
        let rate = sessions(&db.url, round, seconds)?;
        // Keep the listener's socket drained.
        let _ = postgres::fallible_iterator::FallibleIterator::count(
            listener
                .notifications()
                .timeout_iter(Duration::from_millis(10)),
        );
        if wakeups {
            on += rate / 2.0;
        } else {
            off += rate / 2.0;
        }
    }
    Ok(json!({
        "sessions": 16,
        "seconds": seconds,
        "wakeupsOnPerSecond": round(on, 0),
        "wakeupsOffPerSecond": round(off, 0),
        "ratio": if off > 0.0 { round(on / off, 2) } else { 0.0 },
    }))
}

/// Namespaces created per second by 16 sessions for `seconds`, named for run `run`.
fn sessions(url: &str, run: usize, seconds: u64) -> Result<f64, BenchError> {
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let sessions: Vec<_> = (0..16)
        .map(|s| {
            let url = url.to_string();
            std::thread::spawn(move || -> Result<u64, BenchError> {
                let mut c = occ_worker::db::connect(&url, TIMEOUT)?;
                let mut n = 0u64;
                while Instant::now() < until {
                    c.execute(
                        "SELECT occ.namespace_create('admin', $1)",
                        &[&format!("r{run}s{s}n{n}")],
                    )
                    .map_err(step("namespace_create"))?;
                    n += 1;
                }
                Ok(n)
            })
        })
        .collect();
    let mut total = 0;
    for s in sessions {
        total += s
            .join()
            .map_err(|_| BenchError::new("an admission session panicked"))??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}
