//! The publisher threads (`occ-publish-N`, SPEC W1): each runs the publications the scheduler
//! hands it (`finalizer::Publication`), one at a time, and answers with the scheduler's
//! `Event::Published`, the claimed works ready to run, each trusted for one lease from when
//! its claim was sent. A failing claim or recovery is said here (`Failures`), before the
//! answer is sent. Publishers decide nothing about scheduling. `Publishers` owns its threads:
//! closing its publication channel stops them, and dropping it joins them.

use super::finalizer::{self, Event, Publication};
use super::records::Records;
use super::scheduler::PUBLISHERS;
use super::thread::{error_class, Job, Joined, Progress};
use crate::reconcile::{Context, PassError, Registry};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The publisher threads and their publication channel; dropped, it closes the channel and
/// joins them.
pub struct Publishers {
    /// Above `threads` on purpose: fields drop in order, so the channel is closed (and every
    /// publisher leaves its loop) before `threads` joins them; the other way round would wait
    /// for ever.
    publications: Sender<Publication>,
    threads: Vec<Joined>,
}

/// What every publisher thread shares.
#[derive(Clone)]
struct Shared {
    ctx: Arc<Context>,
    /// For the reconcilers' step after stale-claim recovery (`Reconciler::after_stale_recovery`).
    registry: Arc<Registry>,
    progress: Arc<Progress>,
    records: Arc<Records>,
    events: Sender<Event>,
    failures: Arc<Mutex<Failures>>,
}

impl Publishers {
    /// Starts the `PUBLISHERS` named publisher threads. A thread that cannot be spawned is the
    /// error; those already started are stopped and joined as the half-built value drops.
    pub fn spawn(
        ctx: &Arc<Context>,
        registry: &Arc<Registry>,
        progress: &Arc<Progress>,
        records: &Arc<Records>,
        events: &Sender<Event>,
    ) -> std::io::Result<Publishers> {
        let (publications, publications_rx) = crossbeam_channel::bounded(PUBLISHERS);
        let mut publishers = Publishers {
            publications,
            threads: Vec::with_capacity(PUBLISHERS),
        };
        let shared = Shared {
            ctx: ctx.clone(),
            registry: registry.clone(),
            progress: progress.clone(),
            records: records.clone(),
            events: events.clone(),
            failures: Arc::default(),
        };
        for i in 0..PUBLISHERS {
            let (shared, publications) = (shared.clone(), publications_rx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("occ-publish-{i}"))
                .spawn(move || serve(&shared, &publications))?;
            publishers.threads.push(Joined::new(thread));
        }
        Ok(publishers)
    }

    /// Hands a publication to the first free publisher; false when every publisher is gone.
    pub fn send(&self, publication: Publication) -> bool {
        self.publications.send(publication).is_ok()
    }
}

/// A publisher's loop: runs each publication and answers the scheduling thread, until the
/// publication channel closes or the scheduling thread is gone.
fn serve(shared: &Shared, publications: &Receiver<Publication>) {
    let Shared {
        ctx,
        registry,
        progress,
        records,
        events,
        failures,
    } = shared;
    for publication in publications {
        let reserved = publication.claim;
        let published = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            publication.run(ctx, registry, progress, &records.health)
        }))
        .unwrap_or_else(|_| {
            // The batch's passes were answered by their dropped replies; the reserved slots
            // are free again.
            ctx.events.emit(
                "worker.error",
                json!({"code": "WORKER_UNAVAILABLE", "cause": "PublicationPanicked"}),
            );
            finalizer::Published {
                reserved,
                recovery: None,
                claimed: Some(Err(PassError::Invariant("a publication panicked".into()))),
                answers: Vec::new(),
            }
        });
        let event = failures.lock().answer(ctx, progress, published);
        if events.send(event).is_err() {
            break;
        }
    }
}

/// The failing claim and recovery statements: every failure is counted and turns
/// `/readyz` 503 until a claim works again; each is said as `worker.error WORKER_UNAVAILABLE`,
/// at most once per `FAILURE_REPORT_EVERY` while they keep failing.
#[derive(Default)]
struct Failures {
    last_reported: Option<Instant>,
    suppressed: u64,
}

const FAILURE_REPORT_EVERY: Duration = Duration::from_secs(5);

impl Failures {
    /// The scheduler's event for a publication's answer. It also reports the publication's
    /// failures, or clears them when its claim worked, and makes each claimed work a `Job`,
    /// trusted for one lease from when the claim was sent.
    fn answer(
        &mut self,
        ctx: &Context,
        progress: &Progress,
        published: finalizer::Published,
    ) -> Event {
        if let Some(e) = &published.recovery {
            self.report(ctx, progress, e);
        }
        let claims = match published.claimed {
            Some(Ok((claims, sent))) => {
                self.clear(progress);
                let lease = ctx.queue.lease;
                claims
                    .into_iter()
                    .map(|c| Job::new(c, sent, lease))
                    .collect()
            }
            Some(Err(e)) => {
                self.report(ctx, progress, &e);
                Vec::new()
            }
            None => Vec::new(),
        };
        Event::Published {
            reserved: published.reserved,
            claims,
            answers: published.answers,
        }
    }

    fn report(&mut self, ctx: &Context, progress: &Progress, e: &PassError) {
        let cause = error_class(e);
        ctx.metrics
            .claim_failures
            .with_label_values(&[cause.as_str()])
            .inc();
        progress.set_claim_failure(Some(cause.clone()));
        if self
            .last_reported
            .is_some_and(|t| t.elapsed() < FAILURE_REPORT_EVERY)
        {
            self.suppressed += 1;
            return;
        }
        ctx.events.emit(
            "worker.error",
            json!({"code": "WORKER_UNAVAILABLE", "cause": cause, "suppressed": self.suppressed}),
        );
        self.last_reported = Some(Instant::now());
        self.suppressed = 0;
    }

    fn clear(&mut self, progress: &Progress) {
        if self.last_reported.take().is_some() {
            progress.set_claim_failure(None);
        }
        self.suppressed = 0;
    }
}
