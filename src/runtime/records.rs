//! What this process remembers across passes of one work for its event lines, and nothing
//! the queue decides by: the stop yields of a draining stop (SPEC Z5), the deploy timings of a
//! revision's reconcile work (SPEC Z9) and the `worker.health` cadence (SPEC Z7).
//!
//! Every map here is bounded (`MAX_RECORDS` keys, the oldest dropped first): a record lost to
//! eviction or a restart only makes a later line start counting afresh. Nothing here touches
//! the database except the health beat's bounded queue-depth read.

use crate::reconcile::{Context, DeployPhases};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// At most this many keys per map.
pub const MAX_RECORDS: usize = 256;

/// After the first yield of a work, at most one `worker.completed` line per this interval.
pub const STOP_YIELD_LOG_EVERY: Duration = Duration::from_secs(60);

/// A map of at most `MAX_RECORDS` keys that drops its oldest key to make room.
struct Bounded<T> {
    by_key: HashMap<String, (u64, T)>,
    next: u64,
}

impl<T> Default for Bounded<T> {
    fn default() -> Self {
        Bounded {
            by_key: HashMap::new(),
            next: 0,
        }
    }
}

impl<T> Bounded<T> {
    fn entry(&mut self, key: &str, new: impl FnOnce() -> T) -> &mut T {
        if !self.by_key.contains_key(key) {
            if self.by_key.len() >= MAX_RECORDS {
                let oldest = self
                    .by_key
                    .iter()
                    .min_by_key(|(_, (order, _))| *order)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    self.by_key.remove(&oldest);
                }
            }
            self.next += 1;
            self.by_key.insert(key.to_string(), (self.next, new()));
        }
        &mut self.by_key.get_mut(key).expect("inserted above").1
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut T> {
        self.by_key.get_mut(key).map(|(_, v)| v)
    }

    fn remove(&mut self, key: &str) -> Option<T> {
        self.by_key.remove(key).map(|(_, v)| v)
    }

    fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// The stop yields of each work since its last pass that did not yield.
#[derive(Default)]
pub struct StopYields {
    records: Bounded<(u64, Instant)>,
}

impl StopYields {
    /// Counts a yield; returns the count and whether this pass's `worker.completed` is due:
    /// the first yield, then at most one a minute.
    pub fn yielded(&mut self, key: &str, now: Instant) -> (u64, bool) {
        let record = self.records.entry(key, || (0, now));
        record.0 += 1;
        let due = record.0 == 1 || now.duration_since(record.1) >= STOP_YIELD_LOG_EVERY;
        if due {
            record.1 = now;
        }
        (record.0, due)
    }

    /// A pass that did not yield ends the work's yields; returns how many there were.
    pub fn settled(&mut self, key: &str) -> Option<u64> {
        self.records.remove(key).map(|(n, _)| n)
    }
}

/// One deployment's phases as this process saw them.
struct DeployTiming {
    passes: u64,
    pass_started: Instant,
    prepare: Duration,
    first_unready_at: Option<Instant>,
    readiness_wait: Option<Duration>,
    ready_at: Option<Instant>,
}

/// The deploy timings of revision reconcile work, by key.
#[derive(Default)]
pub struct DeployTimings {
    records: Bounded<DeployTiming>,
}

impl DeployTimings {
    /// A pass of the reconcile key starts.
    pub fn begin(&mut self, key: &str, now: Instant) {
        let timing = self.records.entry(key, || DeployTiming {
            passes: 0,
            pass_started: now,
            prepare: Duration::ZERO,
            first_unready_at: None,
            readiness_wait: None,
            ready_at: None,
        });
        timing.passes += 1;
        timing.pass_started = now;
        timing.ready_at = None;
    }

    /// The pass's phases, then the timing fields of its `worker.completed`; a terminal
    /// outcome (success, permanent) ends the record. `None` without a record.
    pub fn finish(
        &mut self,
        key: &str,
        phases: Option<&DeployPhases>,
        terminal: bool,
        age: Duration,
        now: Instant,
    ) -> Option<Value> {
        let timing = self.records.get_mut(key)?;
        if let Some(phases) = phases {
            timing.prepare += phases.prepare;
            if let Some(at) = phases.unready_at {
                timing.first_unready_at.get_or_insert(at);
            }
            if let Some(at) = phases.ready_at {
                timing.ready_at = Some(at);
                if let (None, Some(first)) = (timing.readiness_wait, timing.first_unready_at) {
                    timing.readiness_wait = Some(at.saturating_duration_since(first));
                }
            }
        }
        let ms = |d: Duration| d.as_millis() as u64;
        let readiness_wait = timing.readiness_wait.unwrap_or_else(|| {
            timing
                .first_unready_at
                .map_or(Duration::ZERO, |first| now.saturating_duration_since(first))
        });
        let mut fields = json!({
            "durationMs": ms(now.saturating_duration_since(timing.pass_started)),
            "deployPasses": timing.passes,
            "prepareMs": ms(timing.prepare),
            "readinessWaitMs": ms(readiness_wait),
            "elapsedMs": ms(age),
        });
        if let Some(ready) = timing.ready_at {
            fields["activationMs"] = json!(ms(now.saturating_duration_since(ready)));
        }
        if terminal {
            self.records.remove(key);
        }
        Some(fields)
    }

    /// How many deployments are remembered.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The `worker.health` cadence (SPEC Z7): after every claimed pass, and
/// otherwise at most once per `every` = max(1 s, 20 × poll interval), said only when it
/// changed or `events::IDLE_HEALTH_REPEAT` after the last (`Events::idle_health`).
///
/// [D] The queue depth it reports is read at most once per `every` too and reused in between:
/// the seed counts it again after every pass, a scan of every queued and claimed row, so a
/// pass would cost more the deeper the queue. A beat that needs a fresh count and cannot read
/// it says `worker.error HEALTH_UNAVAILABLE`, as does a beat whose repository sender (when it
/// declares durable broker receipts) is not ready (SPEC G7).
pub struct HealthBeat {
    every: Duration,
    /// When the last line was said.
    last: Mutex<Option<Instant>>,
    /// The last queue depth read, and when.
    pending: Mutex<Option<(Instant, i64)>>,
}

impl HealthBeat {
    pub fn new(poll_interval: Duration) -> HealthBeat {
        HealthBeat {
            every: (poll_interval * 20).max(Duration::from_secs(1)),
            last: Mutex::new(None),
            pending: Mutex::new(None),
        }
    }

    /// Says `worker.health {status: "ready", pending}` (queued and claimed work) when `force`d
    /// or due, once the repository sender, when it declares durable broker receipts, answered
    /// `ready: true` (SPEC G7).
    pub fn beat(&self, ctx: &Context, force: bool) {
        {
            let mut last = self.last.lock();
            if !force && last.is_some_and(|t| t.elapsed() < self.every) {
                return;
            }
            *last = Some(Instant::now());
        }
        // SPEC G7: a sender declaring durable broker receipts is asked `ready` first (2 000 ms);
        // not ready, or no valid answer, is said instead of the beat.
        if let Some(sender) = ctx
            .repository_sender
            .as_ref()
            .filter(|s| s.durable_broker_receipts())
        {
            if !matches!(sender.ready(), Ok(true)) {
                ctx.events
                    .emit("worker.error", json!({"code": "HEALTH_UNAVAILABLE"}));
                return;
            }
        }
        match self.pending(ctx) {
            Some(pending) if force => ctx.events.health(pending),
            Some(pending) => ctx.events.idle_health(pending),
            None => ctx
                .events
                .emit("worker.error", json!({"code": "HEALTH_UNAVAILABLE"})),
        }
    }

    /// The queue depth, read again once the last read is `every` old.
    fn pending(&self, ctx: &Context) -> Option<i64> {
        if let Some((at, pending)) = *self.pending.lock() {
            if at.elapsed() < self.every {
                return Some(pending);
            }
        }
        let read = ctx
            .pool
            .get()
            .ok()
            .and_then(|mut client| crate::queue::work_pending_count(&mut *client).ok())
            .map(|p| p.queued + p.claimed);
        *self.pending.lock() = read.map(|p| (Instant::now(), p));
        read
    }
}

/// Everything this module keeps for one worker process.
pub struct Records {
    pub stop_yields: Mutex<StopYields>,
    pub timings: Mutex<DeployTimings>,
    pub health: HealthBeat,
}

impl Records {
    pub fn new(poll_interval: Duration) -> Records {
        Records {
            stop_yields: Mutex::default(),
            timings: Mutex::default(),
            health: HealthBeat::new(poll_interval),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_yields_log_the_first_then_once_a_minute_and_settle() {
        let mut y = StopYields::default();
        let t0 = Instant::now();
        assert_eq!(y.yielded("k", t0), (1, true));
        assert_eq!(y.yielded("k", t0 + Duration::from_secs(5)), (2, false));
        assert_eq!(y.yielded("k", t0 + Duration::from_secs(59)), (3, false));
        assert_eq!(y.yielded("k", t0 + Duration::from_secs(60)), (4, true));
        assert_eq!(y.yielded("k", t0 + Duration::from_secs(61)), (5, false));
        assert_eq!(y.settled("k"), Some(5));
        assert_eq!(y.settled("k"), None);
    }

    #[test]
    fn deploy_timings_keep_at_most_256_records() {
        let mut t = DeployTimings::default();
        let now = Instant::now();
        for i in 0..300 {
            t.begin(&format!("agent_revision:r{i}:reconcile"), now);
        }
        assert_eq!(t.len(), MAX_RECORDS);
        // The oldest went first.
        let age = Duration::ZERO;
        assert!(t
            .finish("agent_revision:r0:reconcile", None, false, age, now)
            .is_none());
        assert!(t
            .finish("agent_revision:r299:reconcile", None, false, age, now)
            .is_some());
    }

    #[test]
    fn deploy_timings_add_passes_up_until_a_terminal_outcome() {
        let mut t = DeployTimings::default();
        let t0 = Instant::now();
        let key = "agent_revision:r:reconcile";
        t.begin(key, t0);
        let unready = DeployPhases {
            prepare: Duration::from_millis(30),
            unready_at: Some(t0 + Duration::from_millis(30)),
            ready_at: None,
        };
        let age = Duration::from_millis(40);
        let first = t
            .finish(
                key,
                Some(&unready),
                false,
                age,
                t0 + Duration::from_millis(40),
            )
            .unwrap();
        assert_eq!(
            first,
            json!({"durationMs": 40, "deployPasses": 1, "prepareMs": 30, "readinessWaitMs": 10,
                   "elapsedMs": 40})
        );
        let t1 = t0 + Duration::from_millis(1000);
        t.begin(key, t1);
        let ready = DeployPhases {
            prepare: Duration::from_millis(20),
            unready_at: None,
            ready_at: Some(t1 + Duration::from_millis(20)),
        };
        let second = t
            .finish(key, Some(&ready), true, age, t1 + Duration::from_millis(50))
            .unwrap();
        assert_eq!(
            second,
            json!({"durationMs": 50, "deployPasses": 2, "prepareMs": 50, "readinessWaitMs": 990,
                   "activationMs": 30, "elapsedMs": 40})
        );
        assert!(t.is_empty());
    }
}
