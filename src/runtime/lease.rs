//! The heartbeat thread of one live claim (SPEC W1-W3): `occ-lease-<work id>`.
//!
//! Each worker thread has one heartbeat thread, started with its first pass and kept for the
//! next ones, so a live claim has exactly one heartbeat thread and the process never has more
//! than one per worker thread. While it serves a claim the thread is named after the work
//! (`occ-lease-<work id>`, what gdb and `top -H` show); between claims it is `occ-lease-idle`.
//! Starting a thread for every claim and joining it afterwards cost about an eighth of the
//! CPU per work (worker and PostgreSQL together) in the no-op drain (`scripts/bench-queue`;
//! the runs are in the git history of docs/benchmarks.md).
//!
//! While it serves a claim the thread renews every `lease/3` through `LeaseState::renew`, which
//! cancels the pass on a refused or late renewal, or on the second failed renewal in a row
//! (one is retried within the lease); it also wakes when the last confirmed lease runs out, so
//! a lapse interrupts the effect under way at once (`CancelToken::on_cancel`). It never
//! publishes anything.
//!
//! Starting and ending a service wake nobody: the worker thread writes the claim
//! into the slot the two threads share, with when its first renewal is due, and names the
//! heartbeat thread itself (`ThreadName`). The heartbeat thread sleeps until the renewal due
//! of the claim it serves, or for `lease/3` while it serves none, so it always wakes by the
//! first renewal of a claim written into the slot meanwhile: a claim's first renewal is due
//! `lease/3` after it started, later than any deadline the thread set before. Each renewal
//! runs under the slot's lock, so ending a service waits for a renewal under way and no
//! renewal of that claim starts after it. Waking the heartbeat thread for every pass's start
//! and end was two of the context switches a pass cost the machine on two cores.

use crate::queue::Claim;
use crate::reconcile::{Context, LeaseState};
use parking_lot::{Condvar, Mutex};
use std::io::Write;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The claim a heartbeat thread serves, if any, and whether its worker thread is gone.
#[derive(Default)]
struct Slot {
    serving: Option<Serving>,
    closed: bool,
}

/// One claim under service: renewed when `due` passes, until the service ends or a renewal
/// ended the claim (`done`).
struct Serving {
    claim: Claim,
    state: Arc<LeaseState>,
    due: Instant,
    done: bool,
}

struct Shared {
    slot: Mutex<Slot>,
    /// Signalled only when the worker thread leaves (`closed`).
    closing: Condvar,
}

/// A worker thread's heartbeat thread; joined when dropped.
pub struct Heartbeat {
    ctx: Arc<Context>,
    thread: Option<Running>,
}

struct Running {
    shared: Arc<Shared>,
    name: ThreadName,
    handle: JoinHandle<()>,
}

/// The service of one claim; dropping it stops the renewals of that claim (waiting for one
/// under way) and names the heartbeat thread idle again.
pub struct Lease {
    shared: Arc<Shared>,
    name: ThreadName,
}

impl Heartbeat {
    /// A heartbeat for one worker thread; its thread starts with the first claim.
    pub fn new(ctx: Arc<Context>) -> Heartbeat {
        Heartbeat { ctx, thread: None }
    }

    /// Renews `claim` every `lease/3` until the returned `Lease` is dropped. Fails only when
    /// no heartbeat thread can be started (the pass must then not rely on renewals).
    pub fn start(&mut self, claim: Claim, state: Arc<LeaseState>) -> std::io::Result<Lease> {
        let every = every(&self.ctx);
        // A thread that is gone (it cannot be, short of a panic) is replaced.
        if let Some(gone) = self.thread.take_if(|r| r.handle.is_finished()) {
            let _ = gone.handle.join();
        }
        let running = match &mut self.thread {
            Some(running) => running,
            slot @ None => slot.insert(spawn(self.ctx.clone())?),
        };
        running.name.set(&format!("occ-lease-{}", claim.id));
        running.shared.slot.lock().serving = Some(Serving {
            claim,
            state,
            due: Instant::now() + every,
            done: false,
        });
        Ok(Lease {
            shared: running.shared.clone(),
            name: running.name.clone(),
        })
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        if let Some(Running { shared, handle, .. }) = self.thread.take() {
            shared.slot.lock().closed = true;
            shared.closing.notify_one();
            let _ = handle.join();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Waits for a renewal under way (it holds the lock); none of this claim starts after.
        self.shared.slot.lock().serving = None;
        self.name.set("occ-lease-idle");
    }
}

/// How often a claim is renewed.
fn every(ctx: &Context) -> Duration {
    (ctx.queue.lease / 3).max(Duration::from_millis(1))
}

fn spawn(ctx: Arc<Context>) -> std::io::Result<Running> {
    let shared = Arc::new(Shared {
        slot: Mutex::new(Slot::default()),
        closing: Condvar::new(),
    });
    let (named, name) = crossbeam_channel::bounded(1);
    let serving = shared.clone();
    let handle = std::thread::Builder::new()
        .name("occ-lease-idle".into())
        .spawn(move || {
            // The worker thread names this thread through its own `comm` file.
            let _ = named.send(ThreadName::of_this_thread());
            serve(&ctx, &serving);
        })?;
    let Ok(name) = name.recv() else {
        let _ = handle.join();
        return Err(std::io::Error::other("the heartbeat thread is gone"));
    };
    Ok(Running {
        shared,
        name,
        handle,
    })
}

/// The heartbeat thread: renews the claim in the slot when its renewal is due, each renewal
/// under the slot's lock, until the worker thread leaves. After a renewal that ended the claim
/// (or a cancelled pass) it renews that claim no more.
fn serve(ctx: &Context, shared: &Shared) {
    let every = every(ctx);
    let mut slot = shared.slot.lock();
    loop {
        if slot.closed {
            return;
        }
        let now = Instant::now();
        let deadline = match &mut slot.serving {
            // A lapse noticed here interrupts the effect under way (the token's aborts).
            Some(s) if !s.done && s.state.cancel.cause().is_some() => {
                s.done = true;
                continue;
            }
            Some(s) if !s.done && s.due <= now => {
                let renewed = match ctx.pool.get() {
                    Ok(mut client) => {
                        s.state
                            .renew(&mut *client, &s.claim, &ctx.queue, &ctx.events)
                    }
                    // No connection is a failed renewal: retried once within the lease (W3).
                    Err(_) => s.state.renewal_failed(&s.claim, &ctx.events),
                };
                if renewed.is_err() {
                    s.done = true;
                } else {
                    s.due = Instant::now() + every;
                }
                continue;
            }
            // Wakes by the lease's end too, should the renewals have failed until then.
            Some(s) if !s.done => s.due.min(s.state.cancel.lease_deadline()),
            // Serving nothing: a claim written meanwhile is due after this.
            _ => now + every,
        };
        shared.closing.wait_until(&mut slot, deadline);
    }
}

/// A thread's name as `top -H` and gdb show it, settable from another thread of the process:
/// its `/proc/thread-self/comm`, opened once by the thread itself (without `/proc` the thread
/// keeps the name it was spawned with).
#[derive(Clone)]
struct ThreadName(Option<Arc<std::fs::File>>);

impl ThreadName {
    fn of_this_thread() -> ThreadName {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open("/proc/thread-self/comm");
        ThreadName(file.ok().map(Arc::new))
    }

    /// Renames the thread; Linux keeps the first 15 bytes. A failed rename changes nothing
    /// else: names are for people reading thread tools.
    fn set(&self, name: &str) {
        if let Some(file) = &self.0 {
            let bytes: Vec<u8> = name.bytes().filter(|b| *b != 0).take(15).collect();
            // The file takes no offset (no `pwrite`): each write is the whole new name.
            let _ = (&**file).write(&bytes);
        }
    }
}
