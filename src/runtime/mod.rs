//! The worker runtime (SPEC W1-W4, Q13): the threads, and the channels between them. The
//! scheduling thread (`occ-claim`, SPEC's claim thread) owns every scheduling decision
//! through a `Scheduler`, a state machine with no effects of its own: it feeds it each `Event`
//! that arrives on its one channel and executes the commands it returns (`coordinate`). It
//! never waits for the database: the publisher threads (`occ-publish-N`) run every
//! transaction, each publishing a batch of finished passes and claiming works for the free
//! slots in one commit, the idle claims and lease recovery included (`Publishers`,
//! `finalizer`). The pool (`occ-work-N`, `Pool`) runs one pass at a time per thread, each with
//! its heartbeat thread (`occ-lease-<work id>`, `lease`), and hands its report over for
//! publication; its answer comes back as a value, with the thread's next work when the
//! publication claimed one. The listener (`occ-listen`) turns notifications into wake-ups.
//!
//! Pool threads, publishers and the listener only send the scheduler's own `Event`s (one
//! vocabulary, nothing translated on the way), so every cause of activity is in one `match`.
//! The scheduling thread never leaves its loop early: it drains until every in-flight pass has
//! reported. Threads are named, stopped by closing channels, and joined: the pool and the
//! publishers by the scheduling thread as it ends, the rest by `Worker::run`.

pub mod budget;
mod finalizer;
mod lease;
mod pool;
mod publishers;
pub mod records;
mod scheduler;
mod thread;

use crate::cancel::LossCause;
use crate::reconcile::{Context, Registry};
use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use finalizer::{Event, Threads};
use pool::Pool;
use postgres::fallible_iterator::FallibleIterator;
use publishers::Publishers;
use records::Records;
use scheduler::{Command, Scheduler, Settings};
use serde_json::json;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use finalizer::Finalizer;
pub use lease::{Heartbeat, Lease};
pub use scheduler::{LINGER, MAX_BATCH};
use thread::Joined;
pub use thread::{Job, Progress};

/// Settings of the runtime itself (the rest is in `Context`).
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    pub concurrency: usize,
    pub poll_interval: Duration,
    pub shutdown_grace: Duration,
    /// Where the LISTEN connection goes; `None` disables notifications (poll only).
    pub listen_url: Option<String>,
    pub db_timeout: Duration,
}

/// A handle that asks a running worker to stop gracefully.
#[derive(Clone)]
pub struct StopHandle(Sender<Event>, Arc<Progress>);

impl StopHandle {
    /// Marks the worker stopping at once (nothing more is claimed, the listener and the
    /// readiness probe end after their current bounded wait), then wakes the scheduling thread.
    pub fn stop(&self) {
        self.1.stopping.store(true, Ordering::SeqCst);
        let _ = self.0.send(Event::Stop);
    }
}

/// The worker: build it, take a `StopHandle`, then `run` on the current thread.
pub struct Worker {
    ctx: Arc<Context>,
    registry: Arc<Registry>,
    options: RuntimeOptions,
    events_tx: Sender<Event>,
    events_rx: Receiver<Event>,
    pub progress: Arc<Progress>,
}

impl Worker {
    pub fn new(ctx: Arc<Context>, registry: Registry, options: RuntimeOptions) -> Worker {
        let (events_tx, events_rx) = unbounded();
        Worker {
            ctx,
            registry: Arc::new(registry),
            options,
            events_tx,
            events_rx,
            progress: Arc::new(Progress::default()),
        }
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.events_tx.clone(), self.progress.clone())
    }

    /// Runs until stopped; returns after every thread it started has been joined. A thread
    /// that cannot be spawned is the error, once those already started are stopped and joined.
    pub fn run(self) -> std::io::Result<()> {
        let Worker {
            ctx,
            registry,
            options,
            events_tx,
            events_rx,
            progress,
        } = self;
        let listener = Listener::spawn(&options, &events_tx, &progress, &ctx)?;
        let records = Arc::new(Records::new(options.poll_interval));
        let pool = Pool::spawn(options.concurrency, &ctx, &registry, &records, &events_tx)?;
        ctx.events.emit(
            "worker.started",
            json!({
                "computeDriverId": ctx.compute.id(),
                "computeImplementation": ctx.compute.implementation(),
                "sandboxDriverId": ctx.sandbox.driver.as_ref().map(|s| &s.id),
                "repositorySenderId": ctx.repository_sender.as_ref().map(|s| s.id()),
                "concurrency": options.concurrency,
                // The holder every claim of this process names (V29).
                "workerId": ctx.queue.holder.id,
                "host": ctx.queue.holder.host,
                "pid": ctx.queue.holder.pid,
            }),
        );
        ctx.metrics.announce(
            crate::queue::Operation::ALL.map(|o| o.as_str()),
            ctx.compute.implementation(),
        );
        let publishers = Publishers::spawn(&ctx, &registry, &progress, &records, &events_tx)?;
        let schedule_thread =
            spawn_scheduling(&ctx, options, pool, publishers, events_rx, &progress)?;
        // A panic on the scheduling thread (SPEC W4's claim thread) is a broken invariant: the
        // pool and the publishers drain and are joined as the thread unwinds, and `run` fails
        // (W4).
        let schedule_panicked = schedule_thread.join().is_err();
        drop(listener);
        if schedule_panicked {
            // The cause keeps its name: operators' alerts match it.
            ctx.events.emit(
                "worker.error",
                json!({"code": "WORKER_UNAVAILABLE", "cause": "ClaimThreadPanicked"}),
            );
            return Err(std::io::Error::other(
                "the scheduling thread (occ-claim) panicked",
            ));
        }
        ctx.events.emit("worker.stopped", json!({}));
        Ok(())
    }
}

/// Starts the scheduling loop (`coordinate`) on its own named thread, so thread tools show it;
/// SPEC W1 names it `occ-claim`, since it decides every claim the publishers make. The thread
/// owns the pool, the publishers and the event channel, and ends them as it ends.
fn spawn_scheduling(
    ctx: &Arc<Context>,
    options: RuntimeOptions,
    pool: Pool,
    publishers: Publishers,
    events: Receiver<Event>,
    progress: &Arc<Progress>,
) -> std::io::Result<JoinHandle<()>> {
    let (ctx, progress) = (ctx.clone(), progress.clone());
    std::thread::Builder::new()
        .name("occ-claim".into())
        .spawn(move || {
            // Dropped in reverse order when the loop ends, or as it unwinds from a panic: first
            // the event channel (a publisher's late answer is dropped, which answers its
            // passes' threads), then the publishers, then the pool, each closed and joined;
            // every in-flight pass has reported, or its answer was dropped.
            let pool = pool;
            let publishers = publishers;
            let events = events;
            coordinate(&ctx, &options, &pool, &publishers, &events, &progress);
        })
}

/// The scheduling loop, on `occ-claim`: it asks the `Scheduler` what to do, executes it,
/// waits for the next event as long as the scheduler says (a wait that runs out is a poll),
/// and hands it every event that arrived, each burst as a whole, so that a burst of
/// notifications costs one claim. It decides nothing itself and never waits for the database;
/// it returns when the scheduler says `Exit`, or when the pool or the publishers are gone.
fn coordinate(
    ctx: &Context,
    options: &RuntimeOptions,
    pool: &Pool,
    publishers: &Publishers,
    events: &Receiver<Event>,
    progress: &Progress,
) {
    let settings = Settings::new(
        options.concurrency,
        options.poll_interval,
        options.shutdown_grace,
        ctx.queue.lease,
    );
    let mut scheduler = Scheduler::<Threads>::new(settings);
    let effects = Effects {
        ctx,
        options,
        pool,
        publishers,
        progress,
    };
    loop {
        progress.tick();
        // A requested stop is seen before the next database wait, not after it.
        if progress.stopping() {
            let commands = scheduler.handle(Event::Stop, Instant::now());
            if effects.execute(commands).is_break() {
                return;
            }
        }
        let wait = match effects.execute(scheduler.decide(Instant::now())) {
            ControlFlow::Continue(wait) => wait.unwrap_or(options.poll_interval),
            ControlFlow::Break(()) => return,
        };
        let first = match events.recv_timeout(wait) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => Event::Tick,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        for event in std::iter::once(first).chain(events.try_iter()) {
            if effects
                .execute(scheduler.handle(event, Instant::now()))
                .is_break()
            {
                return;
            }
        }
    }
}

/// The scheduling thread's hands: it carries out the scheduler's commands on the pool, the
/// publishers, the leases and the event log.
struct Effects<'a> {
    ctx: &'a Context,
    options: &'a RuntimeOptions,
    pool: &'a Pool,
    publishers: &'a Publishers,
    progress: &'a Progress,
}

impl Effects<'_> {
    /// Carries out `commands` in order; returns the wait they asked for, or `Break` when the
    /// loop must end: the scheduler said `Exit`, or the pool or the publishers are gone (then
    /// nothing will report). The commands after one that failed are still carried out, so
    /// every answer is sent.
    fn execute(&self, commands: Vec<Command<Threads>>) -> ControlFlow<(), Option<Duration>> {
        let (mut wait, mut exit) = (None, false);
        for command in commands {
            match command {
                Command::Publish {
                    batch,
                    claim,
                    recover,
                } => {
                    let publication = finalizer::Publication {
                        batch,
                        claim,
                        recover,
                    };
                    exit |= !self.publishers.send(publication);
                    self.progress.tick();
                }
                Command::Answer { answer, next } => answer.send(next),
                Command::Run(job) => exit |= !self.pool.send(job),
                Command::Stopping { in_flight } => self.ctx.events.emit(
                    "worker.stopping",
                    json!({"inFlight": in_flight, "graceMs": self.options.shutdown_grace.as_millis() as u64}),
                ),
                Command::Cancel(leases) => {
                    for lease in leases {
                        lease.cancel.cancel(LossCause::WorkerStopping);
                    }
                }
                Command::Wait(duration) => wait = Some(duration),
                Command::Exit => exit = true,
            }
        }
        if exit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(wait)
        }
    }
}

/// The LISTEN thread (`occ-listen`), when notifications are on; dropped, it tells the thread
/// to stop and joins it (it notices within its bounded waits).
struct Listener {
    /// Cleared to stop the thread, before it is joined.
    listening: Arc<AtomicBool>,
    thread: Option<Joined>,
}

impl Listener {
    /// Starts the listener when `options` names a LISTEN connection.
    fn spawn(
        options: &RuntimeOptions,
        wake: &Sender<Event>,
        progress: &Arc<Progress>,
        ctx: &Context,
    ) -> std::io::Result<Listener> {
        let listening = Arc::new(AtomicBool::new(true));
        let thread = match &options.listen_url {
            Some(url) => Some(Joined::new(spawn_listener(
                url.clone(),
                options.db_timeout,
                wake.clone(),
                listening.clone(),
                progress.clone(),
                ctx.events.clone(),
            )?)),
            None => None,
        };
        Ok(Listener { listening, thread })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.listening.store(false, Ordering::SeqCst);
        drop(self.thread.take());
    }
}

/// The LISTEN thread: `occ-listen`. Reconnects with backoff; stops when `running` clears.
///
/// A connection that stops answering is noticed: between notifications the thread pings the
/// server every quarter of the database timeout with a no-op bounded by that timeout; a ping
/// that fails (a dead peer, a black hole that still acknowledges) drops the connection, says
/// `worker.error WORKER_UNAVAILABLE` (`NotificationsUnavailable`) and reconnects.
fn spawn_listener(
    url: String,
    timeout: Duration,
    wake: Sender<Event>,
    listening: Arc<AtomicBool>,
    progress: Arc<Progress>,
    events: crate::events::Events,
) -> std::io::Result<JoinHandle<()>> {
    let running = move || listening.load(Ordering::SeqCst) && !progress.stopping();
    let ping_every = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    std::thread::Builder::new()
        .name("occ-listen".into())
        .spawn(move || {
            let mut backoff = Duration::from_millis(100);
            while running() {
                let mut client = match crate::db::connect(&url, timeout) {
                    Ok(c) => c,
                    Err(_) => {
                        sleep_while(&running, backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        continue;
                    }
                };
                let listened = {
                    let _asking = crate::db::waiting();
                    client.batch_execute("LISTEN occ_work").is_ok()
                };
                if !listened {
                    let _closing = crate::db::waiting();
                    drop(client);
                    sleep_while(&running, backoff);
                    continue;
                }
                backoff = Duration::from_millis(100);
                // A wake right after (re)connecting covers notifications sent while away.
                let _ = wake.send(Event::Wake);
                let mut last_ping = Instant::now();
                'listen: while running() && !client.is_closed() {
                    if last_ping.elapsed() >= ping_every {
                        last_ping = Instant::now();
                        if client.is_valid(timeout).is_err() {
                            events.emit(
                                "worker.error",
                                json!({"code": "WORKER_UNAVAILABLE", "cause": "NotificationsUnavailable"}),
                            );
                            break 'listen;
                        }
                    }
                    let mut notifications = client.notifications();
                    let mut iter = notifications.timeout_iter(Duration::from_millis(250));
                    loop {
                        match iter.next() {
                            Ok(Some(_)) => {
                                if wake.send(Event::Wake).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => break,
                            Err(_) => break 'listen,
                        }
                    }
                }
                // Closing says goodbye and waits for the server: a wait the watchdog bounds.
                let _closing = crate::db::waiting();
                drop(client);
            }
        })
}

fn sleep_while(running: &impl Fn() -> bool, total: Duration) {
    let end = Instant::now() + total;
    while running() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
}
