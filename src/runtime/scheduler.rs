//! The runtime's scheduling decisions (SPEC W1, W4, Q13), apart from their effects: a plain
//! state machine with no thread, no channel, no database and no clock of its own. The
//! scheduling thread (`occ-claim`, `runtime::coordinate`) hands it each event with the time
//! it was received (`Scheduler::handle`), asks it what to do once nothing more is waiting
//! (`Scheduler::decide`), and executes the `Command`s it gets back. It must never block, send,
//! sleep or read the clock: everything it knows comes in an `Event` or a `now` argument.
//!
//! It owns the pool's slots (W1). A slot is free, held by a dispatched pass (from its claim
//! until a publication takes the pass or its thread reports it ended), or reserved for the
//! claim of a publication under way (until that publication's answer turns the slots it filled
//! into dispatched passes and frees the rest). Only free slots are reserved, so the live claims
//! never outnumber the worker threads, however many publications are under way.
//!
//! Finished passes gather for publication: a batch goes to a free publisher once every
//! dispatched pass has handed over, or a publisher's share of the pool has (`batch_share`), or
//! the first of them has waited `LINGER` (counted again from a publication's answer, for the
//! passes it dispatched to join them); a lone pass is published at once. Every publication
//! claims for all the free slots, those its batch frees included, so one transaction publishes
//! and claims; one publication is handed over per decision. A claim on its own (a publication
//! with no batch) is due after a wake-up, a poll or a slot freed otherwise than by a
//! publication; one that came back short found the queue empty, so the next waits for one of
//! those. After a wake-up the next idle wait is cut to `FOLLOW_UP`. Expired leases are
//! recovered with a claim, at most once per `Settings::recovery_every`.
//!
//! A stop (W4) ends claiming, waits for the passes in flight and the publications under way,
//! cancels the passes still running when the grace runs out, and exits once nothing is left.
//!
//! It moves the runtime's payloads (finished passes, claimed works, answers, leases) without
//! looking inside them (`Payload`), so its tests drive it with plain strings.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The publisher threads (`occ-publish-N`), each with at most one publication under way on its
/// own connection: while one waits for its statements and its commit, the next batch's are
/// under way, so the database is not idle between the pool's batches.
pub const PUBLISHERS: usize = 2;

/// The longest finished passes wait for company while other passes still run.
pub const LINGER: Duration = Duration::from_millis(1);
/// The most passes one publication takes.
pub const MAX_BATCH: usize = 64;
/// The fewest passes a publication is cut to so that another publisher can take the rest.
pub const MIN_SHARE: usize = 8;
/// How long after a wake-up one more claim is due (Q13): a transaction that left the wake-up
/// to a concurrent one may commit just after the notifying one.
pub const FOLLOW_UP: Duration = Duration::from_millis(15);
/// How often the scheduler is asked again once the grace is over and passes still run.
pub const DRAIN_WAIT: Duration = Duration::from_millis(200);

/// The publishers a worker of `concurrency` keeps busy at once: all of them only while each
/// share of the pool holds `MIN_SHARE` passes or more (from concurrency 16). Below that the
/// smaller batches cost more per work than the overlap gains (`scripts/bench-queue` at
/// concurrency 4: two publishers drained 1,125-1,285 works/s against 1,494-1,525 for one; the
/// runs are in the git history of docs/benchmarks.md).
pub fn publishers_in_use(concurrency: usize) -> usize {
    if concurrency >= PUBLISHERS * MIN_SHARE {
        PUBLISHERS
    } else {
        1
    }
}

/// The most passes one publication takes at `concurrency`: an even share of the pool per
/// publisher in use, so the passes that finish together are published by every publisher at
/// once.
pub fn batch_share(concurrency: usize) -> usize {
    concurrency
        .div_ceil(publishers_in_use(concurrency))
        .clamp(1, MAX_BATCH)
}

/// What the scheduler moves between threads without looking inside: the runtime's types in
/// production, strings in the tests.
pub trait Payload {
    /// A finished pass waiting for its publication.
    type Unit;
    /// A claimed work for a pool thread.
    type Job;
    /// A published pass's answer, for its waiting thread.
    type Answer;
    /// What cancels a dispatched pass.
    type Lease: Clone;
    /// The claim token of a finished pass.
    fn unit_token(unit: &Self::Unit) -> &str;
    /// The claim token of a claimed work.
    fn job_token(job: &Self::Job) -> &str;
    fn job_lease(job: &Self::Job) -> Self::Lease;
}

/// Every cause of scheduling activity.
pub enum Event<P: Payload> {
    /// A notification (Q13): new or released work may be claimable.
    Wake,
    /// The wait the last `Command::Wait` asked for ran out without an event. Whatever that
    /// wait was for (the linger, the follow-up, the grace, the poll interval), it is a poll: a
    /// claim of its own is due.
    Tick,
    /// SIGTERM/SIGINT or an in-process stop request (W4); a second one changes nothing.
    Stop,
    /// A finished pass hands over its report for publication; its thread waits for the answer.
    Handover(P::Unit),
    /// A pass ended without a publication answering it (published or refused on its own thread,
    /// panicked, or dropped by a publication that failed). Keyed by claim token, never by work
    /// id: the same work may be claimed again (after its lease ran out) while an old pass still
    /// runs.
    PassEnded { token: String },
    /// A publication's answer: the slots reserved for its claim, the works it claimed (none
    /// when the claim or the publication failed) and the answers of its batch's passes.
    Published {
        reserved: usize,
        claims: Vec<P::Job>,
        answers: Vec<P::Answer>,
    },
}

/// What the scheduling thread is to do, in the order given.
pub enum Command<P: Payload> {
    /// Hand a publication to a free publisher: publish `batch`, then claim up to `claim` works in
    /// the same transaction, recovering expired leases first when `recover`.
    Publish {
        batch: Vec<P::Unit>,
        claim: usize,
        recover: bool,
    },
    /// Wake a published pass's thread with its answer and, when given, the next work to run.
    Answer {
        answer: P::Answer,
        next: Option<P::Job>,
    },
    /// Put a claimed work on the job channel, for the first idle pool thread.
    Run(P::Job),
    /// Say the worker is stopping (`worker.stopping`), with the passes in flight.
    Stopping { in_flight: usize },
    /// The grace is over: cancel these passes (`WORKER_STOPPING`, W4).
    Cancel(Vec<P::Lease>),
    /// Wait for the next event at most this long, then send `Event::Tick`.
    Wait(Duration),
    /// Every pass has ended and no publication is under way after a stop: leave the loop.
    Exit,
}

/// The scheduler's settings, fixed for a worker's life.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The worker threads (`OCC_WORKER_CONCURRENCY`): the most live claims (W1).
    pub threads: usize,
    /// How long an idle worker waits before it claims again without a wake-up (Q13).
    pub poll_interval: Duration,
    /// How long a stop lets the passes in flight finish (W4).
    pub shutdown_grace: Duration,
    /// The least time between two recoveries of expired leases: half a lease, at most 1 s.
    pub recovery_every: Duration,
}

impl Settings {
    pub fn new(
        threads: usize,
        poll_interval: Duration,
        shutdown_grace: Duration,
        lease: Duration,
    ) -> Settings {
        Settings {
            threads,
            poll_interval,
            shutdown_grace,
            recovery_every: (lease / 2).min(Duration::from_secs(1)),
        }
    }
}

/// Where a stop stands.
#[derive(Clone, Copy)]
enum Shutdown {
    /// The passes in flight may finish until then.
    Grace(Instant),
    /// The grace ran out and the passes then in flight were cancelled.
    Cancelled,
}

/// The scheduling state of one worker (see the module doc).
pub struct Scheduler<P: Payload> {
    settings: Settings,
    /// The publishers kept busy at once, and the most passes each takes (`batch_share`).
    publishers: usize,
    share: usize,
    /// Dispatched passes, by claim token, with what cancels each: from the claim until a
    /// publication takes the pass or its thread reports it ended. Each holds a slot.
    in_flight: HashMap<String, P::Lease>,
    /// Slots reserved for the claims of the publications under way.
    reserved: usize,
    /// Publications handed to a publisher and not answered yet.
    publishing: usize,
    /// Finished passes waiting for a publisher (still in `in_flight`), and since when the
    /// first of them waits.
    waiting: Vec<P::Unit>,
    gathering: Option<Instant>,
    /// Whether a claim of its own is due (see the module doc).
    claim_due: bool,
    /// When the follow-up after a wake-up is due; the next idle wait ends then, and an event
    /// that comes first (or a claim of its own) leaves it to that event's decision.
    follow_up: Option<Instant>,
    last_recovery: Option<Instant>,
    shutdown: Option<Shutdown>,
}

impl<P: Payload> Scheduler<P> {
    /// A scheduler with every slot free and a claim due.
    pub fn new(settings: Settings) -> Scheduler<P> {
        Scheduler {
            publishers: publishers_in_use(settings.threads),
            share: batch_share(settings.threads),
            settings,
            in_flight: HashMap::new(),
            reserved: 0,
            publishing: 0,
            waiting: Vec::new(),
            gathering: None,
            claim_due: true,
            follow_up: None,
            last_recovery: None,
            shutdown: None,
        }
    }

    /// Takes one event received at `now`; returns what must be done for it at once.
    pub fn handle(&mut self, event: Event<P>, now: Instant) -> Vec<Command<P>> {
        match event {
            Event::Tick => self.claim_due = true,
            Event::Wake => {
                self.claim_due = true;
                self.follow_up = Some(now + FOLLOW_UP);
            }
            Event::Handover(unit) => {
                if self.waiting.is_empty() {
                    self.gathering = Some(now);
                }
                self.waiting.push(unit);
            }
            // A pass its publication took has its slot freed already.
            Event::PassEnded { token } => {
                if self.in_flight.remove(&token).is_some() {
                    self.claim_due = true;
                }
            }
            Event::Stop if self.shutdown.is_none() => {
                self.shutdown = Some(Shutdown::Grace(now + self.settings.shutdown_grace));
                let in_flight = self.in_flight.len();
                return vec![Command::Stopping { in_flight }];
            }
            Event::Stop => {}
            Event::Published {
                reserved,
                claims,
                answers,
            } => return self.published(reserved, claims, answers, now),
        }
        Vec::new()
    }

    /// What to do at `now`, once every event waiting was handled: cancel the passes in flight
    /// when the grace ran out, hand at most one publication to a publisher, then `Wait` or
    /// `Exit` (always last).
    pub fn decide(&mut self, now: Instant) -> Vec<Command<P>> {
        let mut commands = Vec::with_capacity(2);
        if matches!(self.shutdown, Some(Shutdown::Grace(until)) if now >= until) {
            // W4: the remaining passes stop at their next cancellation point and release their
            // claims, attempt refunded; a pass waiting for its publication is refused by it.
            commands.push(Command::Cancel(self.in_flight.values().cloned().collect()));
            self.shutdown = Some(Shutdown::Cancelled);
        }
        if let Some(publication) = self.publication(now) {
            commands.push(publication);
        }
        if self.shutdown.is_some() && self.in_flight.is_empty() && self.publishing == 0 {
            commands.push(Command::Exit);
        } else {
            commands.push(Command::Wait(self.wait(now)));
        }
        commands
    }

    /// The slots neither held by a dispatched pass nor reserved for a claim under way.
    fn free(&self) -> usize {
        self.settings.threads - self.in_flight.len() - self.reserved
    }

    /// The publication due at `now`, if any: a batch of finished passes, or a claim on its own.
    /// Either claims for every free slot (none after a stop), the batch's included.
    fn publication(&mut self, now: Instant) -> Option<Command<P>> {
        let publisher_free = self.publishing < self.publishers;
        let claiming = self.shutdown.is_none();
        let publish = publisher_free && !self.waiting.is_empty() && self.batch_due(now);
        let claim_alone = claiming
            && self.claim_due
            && self.free() > 0
            && self.waiting.is_empty()
            && publisher_free;
        if !publish && !claim_alone {
            return None;
        }
        let mut batch = Vec::new();
        if publish {
            batch = self
                .waiting
                .drain(..self.waiting.len().min(self.share))
                .collect();
            if self.waiting.is_empty() {
                self.gathering = None;
            }
        }
        // Each pass of the batch is answered by its publication, and its claim ends with it
        // (or is no longer ours): its slot is free for what that publication claims.
        for unit in &batch {
            self.in_flight.remove(P::unit_token(unit));
        }
        let claim = if claiming { self.free() } else { 0 };
        let recover = claim > 0
            && self.last_recovery.is_none_or(|last| {
                now.saturating_duration_since(last) >= self.settings.recovery_every
            });
        if recover {
            self.last_recovery = Some(now);
        }
        if claim > 0 {
            self.claim_due = false;
        }
        self.reserved += claim;
        self.publishing += 1;
        Some(Command::Publish {
            batch,
            claim,
            recover,
        })
    }

    /// Whether the passes waiting make a batch: every dispatched pass has handed over, or a
    /// publisher's share has, or the first has waited `LINGER`.
    fn batch_due(&self, now: Instant) -> bool {
        self.waiting.len() >= self.in_flight.len()
            || self.waiting.len() >= self.share
            || self
                .gathering
                .is_some_and(|first| now.saturating_duration_since(first) >= LINGER)
    }

    /// How long to wait for the next event. Gathering passes wait at most the rest of
    /// `LINGER` while a publisher is free (with every publisher busy, the next answer ends the
    /// wait); a stop waits for its grace, then looks again every `DRAIN_WAIT`; an idle worker
    /// waits for the follow-up after a wake-up, else the poll interval.
    fn wait(&mut self, now: Instant) -> Duration {
        match (self.gathering, self.shutdown) {
            (Some(first), _) if self.publishing < self.publishers => {
                (first + LINGER).saturating_duration_since(now)
            }
            (_, Some(Shutdown::Grace(until))) => until.saturating_duration_since(now),
            (_, Some(Shutdown::Cancelled)) => DRAIN_WAIT,
            (_, None) => match self.follow_up.take() {
                Some(at) => at.saturating_duration_since(now),
                None => self.settings.poll_interval,
            },
        }
    }

    /// A publication's answer: its reserved slots are free again but for the works it claimed,
    /// which become dispatched passes. Each answered pass's thread gets one of them with its
    /// answer (it runs it without waiting on the job channel); the claims left over go to the
    /// job channel, the answers left over alone.
    ///
    /// Passes already waiting wait `LINGER` again from now: the publisher they waited for is
    /// free, and the passes this answer dispatches may finish within it and join them, so the
    /// pool's passes go on being published together instead of in two cohorts that alternate
    /// on the publisher (at 8 threads, batches of 6.8 works on average instead of 8).
    fn published(
        &mut self,
        reserved: usize,
        claims: Vec<P::Job>,
        answers: Vec<P::Answer>,
        now: Instant,
    ) -> Vec<Command<P>> {
        assert!(
            claims.len() <= reserved,
            "a publication claimed more works than the slots reserved for it (W1)"
        );
        self.publishing -= 1;
        self.reserved -= reserved;
        if !self.waiting.is_empty() {
            self.gathering = Some(now);
        }
        let mut answers = answers.into_iter();
        let mut commands = Vec::with_capacity(claims.len().max(answers.len()));
        for job in claims {
            self.in_flight
                .insert(P::job_token(&job).to_owned(), P::job_lease(&job));
            commands.push(match answers.next() {
                Some(answer) => Command::Answer {
                    answer,
                    next: Some(job),
                },
                None => Command::Run(job),
            });
        }
        commands.extend(answers.map(|answer| Command::Answer { answer, next: None }));
        commands
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashSet, VecDeque};

    /// Plain tokens for every payload: a unit, a job and an answer are their pass's claim
    /// token, and a lease is the token it cancels.
    struct Sim;

    impl Payload for Sim {
        type Unit = String;
        type Job = String;
        type Answer = String;
        type Lease = String;
        fn unit_token(unit: &String) -> &str {
            unit
        }
        fn job_token(job: &String) -> &str {
            job
        }
        fn job_lease(job: &String) -> String {
            job.clone()
        }
    }

    const POLL: Duration = Duration::from_millis(250);
    const GRACE: Duration = Duration::from_secs(1);
    const LEASE: Duration = Duration::from_secs(30);

    /// A command as the tests compare it.
    #[derive(Debug, PartialEq)]
    enum Did {
        Publish(Vec<String>, usize, bool),
        Answer(String, Option<String>),
        Run(String),
        Stopping(usize),
        Cancel(Vec<String>),
        Wait(Duration),
        Exit,
    }

    fn did(commands: Vec<Command<Sim>>) -> Vec<Did> {
        commands
            .into_iter()
            .map(|c| match c {
                Command::Publish {
                    batch,
                    claim,
                    recover,
                } => Did::Publish(batch, claim, recover),
                Command::Answer { answer, next } => Did::Answer(answer, next),
                Command::Run(job) => Did::Run(job),
                Command::Stopping { in_flight } => Did::Stopping(in_flight),
                Command::Cancel(mut leases) => {
                    leases.sort();
                    Did::Cancel(leases)
                }
                Command::Wait(wait) => Did::Wait(wait),
                Command::Exit => Did::Exit,
            })
            .collect()
    }

    fn strings(tokens: &[&str]) -> Vec<String> {
        tokens.iter().map(|t| t.to_string()).collect()
    }

    fn publish(batch: &[&str], claim: usize, recover: bool) -> Did {
        Did::Publish(strings(batch), claim, recover)
    }

    fn run(token: &str) -> Did {
        Did::Run(token.into())
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A scheduler and a clock the test moves.
    struct Clocked {
        s: Scheduler<Sim>,
        start: Instant,
        now: Instant,
    }

    impl Clocked {
        fn new(threads: usize) -> Clocked {
            let start = Instant::now();
            Clocked {
                s: Scheduler::new(Settings::new(threads, POLL, GRACE, LEASE)),
                start,
                now: start,
            }
        }

        /// Moves the clock to `at` after the start.
        fn at(&mut self, at: Duration) -> &mut Clocked {
            self.now = self.start + at;
            self
        }

        fn on(&mut self, event: Event<Sim>) -> Vec<Did> {
            did(self.s.handle(event, self.now))
        }

        fn decide(&mut self) -> Vec<Did> {
            did(self.s.decide(self.now))
        }

        fn published(&mut self, reserved: usize, claims: &[&str], answers: &[&str]) -> Vec<Did> {
            self.on(Event::Published {
                reserved,
                claims: strings(claims),
                answers: strings(answers),
            })
        }

        fn handover(&mut self, token: &str) -> Vec<Did> {
            self.on(Event::Handover(token.into()))
        }

        /// The first claim (every thread's slot) answered with `claims`, at the start.
        fn claimed(threads: usize, claims: &[&str]) -> Clocked {
            let mut c = Clocked::new(threads);
            assert_eq!(c.decide(), [publish(&[], threads, true), Did::Wait(POLL)]);
            let runs: Vec<Did> = claims.iter().map(|t| run(t)).collect();
            assert_eq!(c.published(threads, claims, &[]), runs);
            c
        }
    }

    // W1: the first decision reserves every slot for one claim, and recovers first.
    #[test]
    fn the_first_decision_claims_for_every_thread_and_recovers_expired_leases() {
        let mut c = Clocked::new(4);
        assert_eq!(c.decide(), [publish(&[], 4, true), Did::Wait(POLL)]);
        assert_eq!(c.s.free(), 0);
        // Nothing more to do until the claim is answered.
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
    }

    #[test]
    fn claimed_works_go_to_the_job_channel_and_hold_their_slots() {
        let c = Clocked::claimed(4, &["a", "b"]);
        assert_eq!(c.s.free(), 2);
        assert_eq!(c.s.in_flight.len(), 2);
    }

    // Q13: a claim that came back short found the queue empty: the next waits for a poll.
    #[test]
    fn a_claim_that_came_back_short_waits_for_a_poll() {
        let mut c = Clocked::claimed(4, &["a"]);
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
        c.at(POLL).on(Event::Tick);
        assert_eq!(c.decide(), [publish(&[], 3, false), Did::Wait(POLL)]);
    }

    // Q13: a wake-up makes a claim due, and a burst of them costs one claim.
    #[test]
    fn a_burst_of_wake_ups_costs_one_claim() {
        let mut c = Clocked::claimed(4, &[]);
        c.at(ms(10));
        for _ in 0..3 {
            assert_eq!(c.on(Event::Wake), []);
        }
        assert_eq!(c.decide(), [publish(&[], 4, false), Did::Wait(FOLLOW_UP)]);
        assert_eq!(c.published(4, &[], &[]), []);
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
    }

    // Q13: after a wake-up the next idle wait ends at the follow-up, which makes one more
    // claim due; it is made as soon as a publisher and a slot are free.
    #[test]
    fn the_follow_up_after_a_wake_up_claims_once_more() {
        let mut c = Clocked::claimed(16, &[]);
        c.at(ms(10)).on(Event::Wake);
        assert_eq!(c.decide(), [publish(&[], 16, false), Did::Wait(FOLLOW_UP)]);
        // The wake-up's claim takes longer than the follow-up: the claim waits for its slots.
        c.at(ms(25)).on(Event::Tick);
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
        c.at(ms(30)).published(16, &["a"], &[]);
        assert_eq!(c.decide(), [publish(&[], 15, false), Did::Wait(POLL)]);
    }

    // The follow-up ends one idle wait only: an event that comes first is decided on its own
    // (here the wake-up's claim answered, short, within the follow-up: no claim is due).
    #[test]
    fn an_event_before_the_follow_up_leaves_it_to_that_event() {
        let mut c = Clocked::claimed(16, &[]);
        c.at(ms(10)).on(Event::Wake);
        assert_eq!(c.decide(), [publish(&[], 16, false), Did::Wait(FOLLOW_UP)]);
        c.at(ms(12)).published(16, &[], &[]);
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
    }

    #[test]
    fn a_claim_of_its_own_needs_a_free_publisher() {
        let mut c = Clocked::new(4);
        c.decide();
        c.on(Event::Wake);
        assert_eq!(c.decide(), [Did::Wait(FOLLOW_UP)]);
    }

    #[test]
    fn a_claim_of_its_own_needs_a_free_slot() {
        let mut c = Clocked::claimed(2, &["a", "b"]);
        c.at(ms(5)).on(Event::Wake);
        assert_eq!(c.decide(), [Did::Wait(FOLLOW_UP)]);
        assert_eq!(c.s.free(), 0);
    }

    // W1: a pass that ended unanswered gives its slot back, and a claim for it is due.
    #[test]
    fn a_pass_that_ends_unanswered_frees_its_slot_for_a_claim() {
        let mut c = Clocked::claimed(2, &["a", "b"]);
        c.at(ms(5)).on(Event::PassEnded { token: "a".into() });
        assert_eq!(c.decide(), [publish(&[], 1, false), Did::Wait(POLL)]);
    }

    // W1: a pass its publication took had its slot freed then; ending it frees nothing more.
    #[test]
    fn a_pass_ended_after_its_publication_took_it_frees_nothing_more() {
        let mut c = Clocked::claimed(2, &["a", "b"]);
        c.at(ms(5)).handover("a");
        c.at(ms(6));
        assert_eq!(c.decide(), [publish(&["a"], 1, false), Did::Wait(POLL)]);
        c.on(Event::PassEnded { token: "a".into() });
        assert_eq!(c.s.free(), 0);
        c.on(Event::PassEnded {
            token: "unknown".into(),
        });
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
    }

    // W1: a publication claims for the slots its batch frees and for every other free slot.
    #[test]
    fn a_lone_pass_is_published_at_once_with_a_claim_for_every_free_slot() {
        let mut c = Clocked::claimed(4, &["a"]);
        c.at(ms(3)).handover("a");
        assert_eq!(c.decide(), [publish(&["a"], 4, false), Did::Wait(POLL)]);
        assert_eq!(
            c.published(4, &["b", "c"], &["a"]),
            [Did::Answer("a".into(), Some("b".into())), run("c"),]
        );
        assert_eq!(c.s.free(), 2);
    }

    // Batching: finished passes gather while other dispatched passes still run.
    #[test]
    fn finished_passes_gather_until_every_dispatched_pass_has_handed_over() {
        let mut c = Clocked::claimed(4, &["a", "b", "c"]);
        c.at(ms(3)).handover("a");
        assert_eq!(c.decide(), [Did::Wait(LINGER)]);
        c.at(ms(3) + LINGER / 4).handover("b");
        assert_eq!(c.decide(), [Did::Wait(LINGER * 3 / 4)]);
        c.at(ms(3) + LINGER / 2).handover("c");
        assert_eq!(
            c.decide(),
            [publish(&["a", "b", "c"], 4, false), Did::Wait(POLL)]
        );
    }

    // Batching: the first finished pass waits for company at most `LINGER`.
    #[test]
    fn the_first_finished_pass_waits_at_most_the_linger() {
        let mut c = Clocked::claimed(4, &["a", "b", "c"]);
        c.at(ms(3)).handover("a");
        c.at(ms(3) + LINGER / 2).handover("b");
        assert_eq!(c.decide(), [Did::Wait(LINGER / 2)]);
        c.at(ms(3) + LINGER).on(Event::Tick);
        // "c" still holds its slot: the other three are claimed for.
        assert_eq!(
            c.decide(),
            [publish(&["a", "b"], 3, false), Did::Wait(POLL)]
        );
    }

    // Batching: from concurrency 16 a publisher's share is published without waiting, and the
    // second publisher takes the next share at once.
    #[test]
    fn a_share_is_published_at_once_and_the_second_publisher_takes_the_rest() {
        let tokens: Vec<String> = (0..16).map(|i| format!("t{i:02}")).collect();
        let names: Vec<&str> = tokens.iter().map(String::as_str).collect();
        let mut c = Clocked::claimed(16, &names);
        c.at(ms(3));
        for t in &names[..7] {
            c.handover(t);
        }
        assert_eq!(c.decide(), [Did::Wait(LINGER)]);
        c.handover(names[7]);
        assert_eq!(
            c.decide(),
            [publish(&names[..8], 8, false), Did::Wait(POLL)]
        );
        for t in &names[8..] {
            c.handover(t);
        }
        assert_eq!(
            c.decide(),
            [publish(&names[8..], 8, false), Did::Wait(POLL)]
        );
        assert_eq!(c.s.free(), 0);
        assert_eq!(c.s.reserved, 16);
    }

    // Batching: one batch takes at most a share; what is left waits for a free publisher.
    #[test]
    fn a_batch_takes_at_most_a_share_and_the_rest_waits_for_a_publisher() {
        let tokens: Vec<String> = (0..16).map(|i| format!("t{i:02}")).collect();
        let names: Vec<&str> = tokens.iter().map(String::as_str).collect();
        let mut c = Clocked::claimed(16, &names);
        c.at(ms(3));
        for t in &names {
            c.handover(t);
        }
        // One publication per decision: the second share goes at the next one, at the latest
        // when the linger runs out.
        assert_eq!(
            c.decide(),
            [publish(&names[..8], 8, false), Did::Wait(LINGER)]
        );
        c.at(ms(3) + LINGER).on(Event::Tick);
        assert_eq!(
            c.decide(),
            [publish(&names[8..], 8, false), Did::Wait(POLL)]
        );
    }

    // Below concurrency 16 one publication is under way at a time; with every publisher busy,
    // gathering passes wait for the next answer, not for the linger.
    #[test]
    fn below_concurrency_16_passes_wait_for_the_one_publisher() {
        let mut c = Clocked::claimed(8, &["a", "b", "c", "d"]);
        c.at(ms(3)).handover("a");
        c.at(ms(3) + LINGER);
        assert_eq!(c.decide(), [publish(&["a"], 5, false), Did::Wait(POLL)]);
        c.at(ms(5)).handover("b");
        c.handover("c");
        c.handover("d");
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
        c.at(ms(6)).published(5, &[], &["a"]);
        assert_eq!(
            c.decide(),
            [publish(&["b", "c", "d"], 8, false), Did::Wait(POLL)]
        );
    }

    // Batching: passes that waited for the busy publisher wait the linger again once it
    // answers, so the passes its answer dispatched can join them: the pool is published
    // together, not in two cohorts taking turns on the publisher.
    #[test]
    fn passes_that_waited_for_the_publisher_linger_again_for_the_passes_it_dispatched() {
        let mut c = Clocked::claimed(8, &["a", "b", "c", "d"]);
        c.at(ms(3)).handover("a");
        c.handover("b");
        c.at(ms(3) + LINGER);
        assert_eq!(
            c.decide(),
            [publish(&["a", "b"], 6, false), Did::Wait(POLL)]
        );
        c.at(ms(5)).handover("c");
        c.handover("d");
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
        let dispatched = ["e", "f", "g", "h", "i", "j"];
        c.at(ms(6)).published(6, &dispatched, &["a", "b"]);
        // "c" has waited since 5 ms: without the new linger it would go now, alone with "d".
        assert_eq!(c.decide(), [Did::Wait(LINGER)]);
        c.at(ms(6) + LINGER / 2);
        for t in dispatched {
            c.handover(t);
        }
        assert_eq!(
            c.decide(),
            [
                publish(&["c", "d", "e", "f", "g", "h", "i", "j"], 8, false),
                Did::Wait(POLL)
            ]
        );
    }

    // ... and go without them when they have not all handed over within it.
    #[test]
    fn passes_that_waited_for_the_publisher_go_when_the_new_linger_runs_out() {
        let mut c = Clocked::claimed(4, &["a", "b"]);
        c.at(ms(3)).handover("a");
        c.at(ms(3) + LINGER);
        assert_eq!(c.decide(), [publish(&["a"], 3, false), Did::Wait(POLL)]);
        c.at(ms(5)).handover("b");
        c.at(ms(6)).published(3, &["c", "d"], &["a"]);
        assert_eq!(c.decide(), [Did::Wait(LINGER)]);
        c.at(ms(6) + LINGER / 2).handover("c");
        assert_eq!(c.decide(), [Did::Wait(LINGER / 2)]);
        c.at(ms(6) + LINGER).on(Event::Tick);
        // "d" still runs: "b" and "c" go, claiming for their slots and the one left free.
        assert_eq!(
            c.decide(),
            [publish(&["b", "c"], 3, false), Did::Wait(POLL)]
        );
    }

    #[test]
    fn the_second_publisher_takes_a_share_only_from_concurrency_16() {
        let at = |c| (publishers_in_use(c), batch_share(c));
        assert_eq!(at(1), (1, 1));
        assert_eq!(at(4), (1, 4));
        assert_eq!(at(15), (1, 15));
        assert_eq!(at(16), (2, 8));
        assert_eq!(at(17), (2, 9));
        assert_eq!(at(64), (2, 32));
        assert_eq!(at(256), (2, MAX_BATCH));
    }

    // A claim of its own waits while passes gather: their publication will claim.
    #[test]
    fn no_claim_of_its_own_while_passes_gather() {
        let mut c = Clocked::claimed(4, &["a", "b"]);
        c.at(ms(3)).on(Event::Wake);
        c.handover("a");
        assert_eq!(c.decide(), [Did::Wait(LINGER)]);
    }

    // Each answered pass's thread gets the next claim with its answer; the rest go to the job
    // channel.
    #[test]
    fn claims_go_to_the_answered_threads_first_then_the_job_channel() {
        let mut c = Clocked::claimed(4, &["a"]);
        c.at(ms(3)).handover("a");
        c.decide();
        assert_eq!(
            c.published(4, &["x", "y", "z"], &["a"]),
            [
                Did::Answer("a".into(), Some("x".into())),
                run("y"),
                run("z"),
            ]
        );
        assert_eq!(c.s.free(), 1);
    }

    #[test]
    fn answers_left_over_go_alone() {
        let mut c = Clocked::claimed(3, &["a", "b", "c"]);
        for t in ["a", "b", "c"] {
            c.at(ms(3)).handover(t);
        }
        assert_eq!(
            c.decide(),
            [publish(&["a", "b", "c"], 3, false), Did::Wait(POLL)]
        );
        assert_eq!(
            c.published(3, &["x"], &["a", "b", "c"]),
            [
                Did::Answer("a".into(), Some("x".into())),
                Did::Answer("b".into(), None),
                Did::Answer("c".into(), None),
            ]
        );
    }

    // W1: a publication that failed (or whose claim failed) claimed nothing: every slot it
    // reserved is free again, and the next claim waits for a poll or a wake-up.
    #[test]
    fn a_failed_publication_returns_its_reserved_slots() {
        let mut c = Clocked::claimed(4, &["a", "b", "c", "d"]);
        for t in ["a", "b", "c", "d"] {
            c.at(ms(3)).handover(t);
        }
        assert_eq!(
            c.decide(),
            [publish(&["a", "b", "c", "d"], 4, false), Did::Wait(POLL)]
        );
        assert_eq!(c.s.free(), 0);
        assert_eq!(c.published(4, &[], &["a", "b", "c", "d"]).len(), 4);
        assert_eq!(c.s.free(), 4);
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
        c.at(ms(300)).on(Event::Tick);
        assert_eq!(c.decide(), [publish(&[], 4, false), Did::Wait(POLL)]);
    }

    // A publication that panicked answers nothing (its replies were dropped): its passes' threads
    // report them ended, which frees nothing more.
    #[test]
    fn a_publication_that_panicked_frees_its_slots_once() {
        let mut c = Clocked::claimed(2, &["a", "b"]);
        c.at(ms(3)).handover("a");
        c.handover("b");
        assert_eq!(
            c.decide(),
            [publish(&["a", "b"], 2, false), Did::Wait(POLL)]
        );
        assert_eq!(c.published(2, &[], &[]), []);
        c.on(Event::PassEnded { token: "a".into() });
        c.on(Event::PassEnded { token: "b".into() });
        assert_eq!(c.s.free(), 2);
        assert_eq!(c.decide(), [Did::Wait(POLL)]);
    }

    #[test]
    #[should_panic(expected = "more works than the slots reserved")]
    fn a_publication_that_claimed_more_than_its_reservation_is_a_broken_invariant() {
        let mut c = Clocked::new(2);
        c.decide();
        c.published(2, &["a", "b", "c"], &[]);
    }

    // Recovery rides a claim, at most once per `recovery_every`.
    #[test]
    fn recovery_rides_a_claim_at_most_once_per_interval() {
        let mut c = Clocked::claimed(2, &[]);
        c.at(ms(500)).on(Event::Tick);
        assert_eq!(c.decide(), [publish(&[], 2, false), Did::Wait(POLL)]);
        c.published(2, &[], &[]);
        c.at(ms(999)).on(Event::Tick);
        assert_eq!(c.decide(), [publish(&[], 2, false), Did::Wait(POLL)]);
        c.published(2, &[], &[]);
        c.at(ms(1000)).on(Event::Tick);
        assert_eq!(c.decide(), [publish(&[], 2, true), Did::Wait(POLL)]);
    }

    #[test]
    fn recovery_waits_for_a_publication_that_claims() {
        let mut c = Clocked::claimed(1, &["a"]);
        c.at(ms(2000)).handover("a");
        c.on(Event::Stop);
        // After a stop nothing is claimed, so nothing is recovered either.
        assert_eq!(c.decide(), [publish(&["a"], 0, false), Did::Wait(GRACE)]);
    }

    #[test]
    fn recovery_is_due_every_half_lease_at_most_every_second() {
        let every = |lease| Settings::new(1, POLL, GRACE, lease).recovery_every;
        assert_eq!(every(ms(600)), ms(300));
        assert_eq!(every(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(every(LEASE), Duration::from_secs(1));
    }

    // W4: a stop says so once, with the passes in flight.
    #[test]
    fn a_stop_says_so_once_with_the_passes_in_flight() {
        let mut c = Clocked::claimed(4, &["a", "b"]);
        assert_eq!(c.at(ms(5)).on(Event::Stop), [Did::Stopping(2)]);
        assert_eq!(c.on(Event::Stop), []);
    }

    // W4: after a stop nothing is claimed, whatever makes a claim due.
    #[test]
    fn after_a_stop_nothing_is_claimed() {
        let mut c = Clocked::claimed(4, &["a"]);
        c.at(ms(100)).on(Event::Stop);
        c.on(Event::Wake);
        c.on(Event::Tick);
        assert_eq!(c.decide(), [Did::Wait(GRACE)]);
        c.at(ms(300));
        assert_eq!(c.decide(), [Did::Wait(GRACE - ms(200))]);
    }

    // W4: the scheduler exits once every pass in flight has ended.
    #[test]
    fn a_stop_waits_for_the_passes_in_flight_then_exits() {
        let mut c = Clocked::claimed(4, &["a", "b"]);
        c.at(ms(5)).on(Event::Stop);
        c.on(Event::PassEnded { token: "a".into() });
        assert_eq!(c.decide(), [Did::Wait(GRACE)]);
        c.on(Event::PassEnded { token: "b".into() });
        assert_eq!(c.decide(), [Did::Exit]);
    }

    // W4: finished passes are still published after a stop, without a claim, and the
    // scheduler waits for their publication before it exits.
    #[test]
    fn a_stop_publishes_the_finished_passes_and_waits_for_their_publication() {
        let mut c = Clocked::claimed(4, &["a", "b"]);
        c.at(ms(5)).on(Event::Stop);
        c.handover("a");
        assert_eq!(c.decide(), [Did::Wait(LINGER)]);
        c.at(ms(5) + LINGER).on(Event::Tick);
        assert_eq!(
            c.decide(),
            [publish(&["a"], 0, false), Did::Wait(GRACE - LINGER)]
        );
        c.on(Event::PassEnded { token: "b".into() });
        assert_eq!(c.decide(), [Did::Wait(GRACE - LINGER)]);
        assert_eq!(c.published(0, &[], &["a"]), [Did::Answer("a".into(), None)]);
        assert_eq!(c.decide(), [Did::Exit]);
    }

    // W4: a claim under way at the stop is waited for, and what it claimed runs (and holds the
    // exit) like any pass in flight.
    #[test]
    fn a_stop_waits_for_a_claim_under_way_and_runs_what_it_claimed() {
        let mut c = Clocked::new(4);
        c.decide();
        assert_eq!(c.at(ms(1)).on(Event::Stop), [Did::Stopping(0)]);
        assert_eq!(c.decide(), [Did::Wait(GRACE)]);
        assert_eq!(c.published(4, &["x"], &[]), [run("x")]);
        assert_eq!(c.decide(), [Did::Wait(GRACE)]);
        c.on(Event::PassEnded { token: "x".into() });
        assert_eq!(c.decide(), [Did::Exit]);
    }

    #[test]
    fn an_idle_worker_exits_at_once_on_a_stop() {
        let mut c = Clocked::claimed(2, &[]);
        assert_eq!(c.at(ms(5)).on(Event::Stop), [Did::Stopping(0)]);
        assert_eq!(c.decide(), [Did::Exit]);
    }

    // W4: when the grace runs out every pass still in flight is cancelled, once, waiting ones
    // included; the scheduler then looks again every `DRAIN_WAIT` until they have ended.
    #[test]
    fn the_end_of_the_grace_cancels_every_pass_in_flight_once() {
        let mut c = Clocked::claimed(4, &["a", "b", "c"]);
        c.at(ms(5)).on(Event::Stop);
        c.on(Event::PassEnded { token: "b".into() });
        c.at(ms(5) + GRACE - ms(1)).handover("c");
        assert_eq!(c.decide(), [Did::Wait(LINGER)]);
        c.at(ms(5) + GRACE).on(Event::Tick);
        assert_eq!(
            c.decide(),
            [
                Did::Cancel(strings(&["a", "c"])),
                publish(&["c"], 0, false),
                Did::Wait(DRAIN_WAIT),
            ]
        );
        assert_eq!(c.decide(), [Did::Wait(DRAIN_WAIT)]);
        assert_eq!(c.published(0, &[], &["c"]), [Did::Answer("c".into(), None)]);
        c.on(Event::PassEnded { token: "a".into() });
        assert_eq!(c.decide(), [Did::Exit]);
    }

    /// splitmix64: a seeded generator for the simulations (no dependency, same order on every
    /// machine).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }

        fn percent(&mut self, p: usize) -> bool {
            self.below(100) < p
        }
    }

    /// A publication a simulated publisher has under way.
    struct UnderWay {
        batch: Vec<String>,
        claim: usize,
    }

    /// What a simulation exercised, so a test can tell it was not trivial.
    #[derive(Default, Debug)]
    struct Seen {
        claims: usize,
        batched: usize,
        largest_batch: usize,
        failures: usize,
        cancelled: usize,
        claims_after_stop: usize,
    }

    /// The world around a scheduler, in the scheduling thread's loop (decide, wait, handle what
    /// arrived): pool threads that take jobs and finish passes (most hand them over, some end
    /// on their own), publishers that answer publications in any order (claiming from a queue
    /// that runs dry now and then, failing or panicking now and then), notifications, a stop,
    /// and a clock that moves by random steps or to the end of the wait. It holds the
    /// scheduler to W1 after every step from the world's own count of live claims and busy
    /// threads, and at the end to W4: it exited, and every work claimed ran exactly once and
    /// ended.
    struct World {
        rng: Rng,
        s: Scheduler<Sim>,
        threads: usize,
        now: Instant,
        wait: Duration,
        tokens: usize,
        queue: usize,
        channel: VecDeque<String>,
        running: Vec<String>,
        handed: HashSet<String>,
        publications: Vec<UnderWay>,
        live: HashSet<String>,
        ran: HashMap<String, u32>,
        claimed: Vec<String>,
        ended: HashSet<String>,
        cancelled: HashSet<String>,
        stopped: bool,
        exited: bool,
        seen: Seen,
    }

    impl World {
        fn new(seed: u64, threads: usize) -> World {
            let mut rng = Rng(seed);
            let grace = [Duration::ZERO, ms(3), ms(40), GRACE][rng.below(4)];
            World {
                s: Scheduler::new(Settings::new(threads, POLL, grace, ms(2000))),
                queue: rng.below(threads * 3),
                rng,
                threads,
                now: Instant::now(),
                wait: Duration::ZERO,
                tokens: 0,
                channel: VecDeque::new(),
                running: Vec::new(),
                handed: HashSet::new(),
                publications: Vec::new(),
                live: HashSet::new(),
                ran: HashMap::new(),
                claimed: Vec::new(),
                ended: HashSet::new(),
                cancelled: HashSet::new(),
                stopped: false,
                exited: false,
                seen: Seen::default(),
            }
        }

        /// `steps` random steps, then a stop (if none came), then steps until the exit.
        fn run(mut self, steps: usize) -> Seen {
            self.decide();
            for _ in 0..steps {
                self.step();
            }
            if !self.stopped {
                self.stop();
            }
            for _ in 0..100_000 {
                if self.exited {
                    break;
                }
                self.step();
            }
            assert!(self.exited, "W4: the scheduler never exited");
            for token in &self.claimed {
                assert_eq!(self.ran.get(token), Some(&1), "{token} ran once");
                assert!(self.ended.contains(token), "{token} ended");
            }
            assert_eq!(self.ran.len(), self.claimed.len(), "only claimed works ran");
            self.seen
        }

        /// One thing happens: a thread takes a job, or events arrive (a few at once now and
        /// then) and the scheduler decides.
        fn step(&mut self) {
            let idle_thread = self.running.len() + self.handed.len() < self.threads;
            if !self.channel.is_empty() && idle_thread && self.rng.percent(50) {
                let job = self.channel.pop_front().unwrap();
                self.start(job);
                return;
            }
            let mut events = 1;
            while events > 0 && !self.exited {
                events -= 1;
                self.arrive();
                if self.rng.percent(25) {
                    events += 1;
                }
            }
            if !self.exited {
                self.decide();
            }
        }

        /// One event arrives, or the wait runs out.
        fn arrive(&mut self) {
            let roll = self.rng.below(100);
            let lapse = [0, 50, 300, 1_000, 2_000, 20_000][self.rng.below(6)];
            let lapse = Duration::from_micros(lapse).min(self.wait);
            if roll < 40 && !self.running.is_empty() {
                self.now += lapse;
                self.finish();
            } else if roll < 70 && !self.publications.is_empty() {
                self.now += lapse;
                self.answer();
            } else if roll < 80 && !self.stopped {
                self.now += lapse;
                self.queue += self.rng.below(self.threads * 2 + 1);
                if self.rng.percent(70) {
                    self.handle(Event::Wake);
                }
            } else if roll < 81 && !self.stopped {
                self.now += lapse;
                self.stop();
            } else {
                self.now += self.wait;
                self.handle(Event::Tick);
            }
        }

        fn stop(&mut self) {
            self.stopped = true;
            self.handle(Event::Stop);
        }

        /// A running pass finishes: it hands over its report, or ends on its own.
        fn finish(&mut self) {
            let token = self.running.swap_remove(self.rng.below(self.running.len()));
            if self.rng.percent(80) {
                self.handed.insert(token.clone());
                self.handle(Event::Handover(token));
            } else {
                self.live.remove(&token);
                self.ended.insert(token.clone());
                self.handle(Event::PassEnded { token });
            }
        }

        /// A publisher answers one of the publications under way.
        fn answer(&mut self) {
            let UnderWay { batch, claim } = self
                .publications
                .swap_remove(self.rng.below(self.publications.len()));
            for token in &batch {
                // Committed, rolled back (a claim lost) or abandoned: no longer the worker's.
                self.live.remove(token);
                self.ended.insert(token.clone());
            }
            let roll = self.rng.below(100);
            let reserved = claim;
            if roll < 80 {
                let n = claim.min(self.queue);
                self.queue -= n;
                let claims: Vec<String> = (0..n).map(|_| self.claim()).collect();
                self.handle(Event::Published {
                    reserved,
                    claims,
                    answers: batch,
                });
            } else if roll < 90 {
                self.seen.failures += 1;
                self.handle(Event::Published {
                    reserved,
                    claims: Vec::new(),
                    answers: batch,
                });
            } else {
                // A publication that panicked: its replies were dropped, so each thread of
                // the batch reports its pass ended.
                self.seen.failures += 1;
                self.handle(Event::Published {
                    reserved,
                    claims: Vec::new(),
                    answers: Vec::new(),
                });
                for token in batch {
                    assert!(self.handed.remove(&token));
                    self.handle(Event::PassEnded { token });
                }
            }
        }

        fn claim(&mut self) -> String {
            self.tokens += 1;
            let token = format!("w{}", self.tokens);
            self.live.insert(token.clone());
            self.claimed.push(token.clone());
            self.seen.claims += 1;
            if self.stopped {
                self.seen.claims_after_stop += 1;
            }
            token
        }

        fn start(&mut self, job: String) {
            *self.ran.entry(job.clone()).or_default() += 1;
            self.running.push(job);
        }

        fn handle(&mut self, event: Event<Sim>) {
            let commands = self.s.handle(event, self.now);
            self.execute(commands);
        }

        fn decide(&mut self) {
            let commands = self.s.decide(self.now);
            assert!(
                matches!(commands.last(), Some(Command::Wait(_) | Command::Exit)),
                "a decision ends with a wait or the exit"
            );
            self.execute(commands);
        }

        fn execute(&mut self, commands: Vec<Command<Sim>>) {
            for command in commands {
                assert!(!self.exited, "nothing after the exit");
                match command {
                    Command::Publish {
                        batch,
                        claim,
                        recover,
                    } => {
                        assert!(self.publications.len() < self.s.publishers);
                        assert!(batch.len() <= self.s.share);
                        for token in &batch {
                            assert!(self.handed.contains(token), "{token} handed over");
                        }
                        assert!(!(self.stopped && claim > 0), "W4: no claim after a stop");
                        assert!(claim > 0 || !recover, "recovery rides a claim");
                        if batch.len() > 1 {
                            self.seen.batched += 1;
                        }
                        self.seen.largest_batch = self.seen.largest_batch.max(batch.len());
                        self.publications.push(UnderWay { batch, claim });
                    }
                    Command::Answer { answer, next } => {
                        assert!(self.handed.remove(&answer), "{answer} was waiting");
                        if let Some(job) = next {
                            self.start(job);
                        }
                    }
                    Command::Run(job) => self.channel.push_back(job),
                    Command::Stopping { .. } => assert!(self.stopped),
                    Command::Cancel(leases) => {
                        self.seen.cancelled += leases.len();
                        self.cancelled.extend(leases);
                    }
                    Command::Wait(wait) => self.wait = wait,
                    Command::Exit => {
                        assert!(self.stopped, "W4: the exit follows a stop");
                        assert!(self.running.is_empty() && self.handed.is_empty());
                        assert!(self.channel.is_empty() && self.publications.is_empty());
                        self.exited = true;
                    }
                }
                self.check_w1();
            }
        }

        /// W1 from the world's own counts: the live claims, and the claims that the
        /// publications under way may add when they commit (in any order), never outnumber
        /// the worker threads; nor do the works dispatched (running, waiting for an answer, or
        /// on the bounded job channel).
        fn check_w1(&self) {
            let may_add: usize = self
                .publications
                .iter()
                .map(|p| p.claim.saturating_sub(p.batch.len()))
                .sum();
            assert!(
                self.live.len() + may_add <= self.threads,
                "W1: {} live claims, {may_add} more under way, {} threads",
                self.live.len(),
                self.threads
            );
            let dispatched = self.running.len() + self.handed.len() + self.channel.len();
            assert!(
                dispatched <= self.threads,
                "W1: {dispatched} works dispatched"
            );
            assert!(self.s.in_flight.len() + self.s.reserved <= self.threads);
        }
    }

    const SIMULATED_THREADS: [usize; 9] = [1, 2, 3, 4, 8, 15, 16, 17, 64];

    // W1 after every step of seeded random event orders, at concurrencies on both sides of
    // the second publisher's threshold.
    #[test]
    fn w1_holds_after_every_step_of_random_event_orders() {
        for threads in SIMULATED_THREADS {
            for seed in 0..40 {
                World::new(seed * 1_000 + threads as u64, threads).run(300);
            }
        }
    }

    // W4 over random event orders: whatever is under way when the stop comes, the scheduler
    // exits only after every claimed work ran once and ended; the runs batch, fail, claim
    // after a stop (a claim under way) and cancel at the end of a grace.
    #[test]
    fn random_event_orders_run_every_claimed_work_once_and_exit_after_a_stop() {
        let mut total = Seen::default();
        for threads in SIMULATED_THREADS {
            for seed in 0..20 {
                let seen = World::new(7_919 * seed + threads as u64, threads).run(150);
                total.claims += seen.claims;
                total.batched += seen.batched;
                total.largest_batch = total.largest_batch.max(seen.largest_batch);
                total.failures += seen.failures;
                total.cancelled += seen.cancelled;
                total.claims_after_stop += seen.claims_after_stop;
            }
        }
        assert!(total.claims > 1_000, "{total:?}");
        assert!(total.batched > 100, "{total:?}");
        assert!(total.largest_batch > MIN_SHARE, "{total:?}");
        assert!(total.failures > 10, "{total:?}");
        assert!(total.cancelled > 0, "{total:?}");
        assert!(total.claims_after_stop > 0, "{total:?}");
    }
}
