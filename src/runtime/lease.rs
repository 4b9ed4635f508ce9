//! The heartbeat thread of one live claim (SPEC W1-W3): `occ-lease-<work id>`.
//!
//! Each worker thread has one heartbeat thread, started with its first pass and kept for the
//! next ones, so a live claim has exactly one heartbeat thread and the process never has more
//! than one per worker thread. While it serves a claim the thread is named after the work
//! (`occ-lease-<work id>`, what gdb and `top -H` show); between claims it is `occ-lease-idle`.
//! Starting a thread for every claim and joining it afterwards cost about an eighth of the
//! CPU per work (worker and PostgreSQL together) in the no-op drain (README, Benchmarks).
//!
//! While it serves a claim the thread renews every `lease/3` through `LeaseState::renew`, which
//! cancels the pass on a refused or late renewal, or on the second failed renewal in a row
//! (one is retried within the lease); a lapse is caught by the token itself at the next
//! cancellation point. Dropping the `Lease` ends the service: it waits for a renewal of that
//! claim under way (each renewal runs under the claim's `ended` lock and is skipped once the
//! service ended), never for the thread to be scheduled, so a pass's start and end cost the
//! worker thread no wait on its heartbeat thread. It never publishes anything.

use crate::queue::Claim;
use crate::reconcile::{Context, LeaseState};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use std::sync::Arc;
use std::thread::JoinHandle;

/// One claim handed to the heartbeat thread: renew it until `stop` closes, and never once
/// `ended` is set.
struct Serve {
    claim: Claim,
    state: Arc<LeaseState>,
    stop: Receiver<()>,
    ended: Arc<Mutex<bool>>,
}

/// A worker thread's heartbeat thread; joined when dropped.
pub struct Heartbeat {
    ctx: Arc<Context>,
    thread: Option<Running>,
}

struct Running {
    serve: Sender<Serve>,
    handle: JoinHandle<()>,
}

/// The service of one claim; dropping it stops the renewals of that claim (waiting for one
/// under way).
pub struct Lease {
    stop: Option<Sender<()>>,
    ended: Arc<Mutex<bool>>,
}

impl Heartbeat {
    /// A heartbeat for one worker thread; its thread starts with the first claim.
    pub fn new(ctx: Arc<Context>) -> Heartbeat {
        Heartbeat { ctx, thread: None }
    }

    /// Renews `claim` every `lease/3` until the returned `Lease` is dropped. Fails only when
    /// no heartbeat thread can be started (the pass must then not rely on renewals).
    pub fn start(&mut self, claim: Claim, state: Arc<LeaseState>) -> std::io::Result<Lease> {
        let (stop, stopped) = bounded::<()>(0);
        let ended = Arc::new(Mutex::new(false));
        let serve = Serve {
            claim,
            state,
            stop: stopped,
            ended: ended.clone(),
        };
        // A thread that is gone (it cannot be, short of a panic) is replaced once.
        if let Err(back) = self.running()?.serve.send(serve) {
            if let Some(gone) = self.thread.take() {
                let _ = gone.handle.join();
            }
            self.running()?
                .serve
                .send(back.into_inner())
                .map_err(|_| std::io::Error::other("the heartbeat thread is gone"))?;
        }
        Ok(Lease {
            stop: Some(stop),
            ended,
        })
    }

    /// The heartbeat thread, started if there is none.
    fn running(&mut self) -> std::io::Result<&Running> {
        Ok(match &mut self.thread {
            Some(running) => running,
            slot @ None => slot.insert(spawn(self.ctx.clone())?),
        })
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        if let Some(Running { serve, handle, .. }) = self.thread.take() {
            // Closing the channel ends the thread.
            drop(serve);
            let _ = handle.join();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // No renewal of this claim starts after this (one under way is waited for); the
        // thread leaves the claim when the channel closes.
        *self.ended.lock() = true;
        self.stop.take();
    }
}

fn spawn(ctx: Arc<Context>) -> std::io::Result<Running> {
    // One claim may wait while the thread leaves the previous one: the pass does not wait
    // for the thread to be scheduled.
    let (serve, claims) = bounded::<Serve>(1);
    let handle = std::thread::Builder::new()
        .name("occ-lease-idle".into())
        .spawn(move || {
            for Serve {
                claim,
                state,
                stop,
                ended,
            } in claims
            {
                name_this_thread(&format!("occ-lease-{}", claim.id));
                renew_until_stopped(&ctx, &claim, &state, &stop, &ended);
                name_this_thread("occ-lease-idle");
            }
        })?;
    Ok(Running { serve, handle })
}

/// Renews every `lease/3` until `stop` closes, each renewal under the `ended` lock and only
/// while it is unset; after a renewal that ended the claim (or a cancelled pass) it only waits
/// for `stop`, so the thread never serves two claims at once.
fn renew_until_stopped(
    ctx: &Context,
    claim: &Claim,
    state: &LeaseState,
    stop: &Receiver<()>,
    ended: &Mutex<bool>,
) {
    let every = (ctx.queue.lease / 3).max(std::time::Duration::from_millis(1));
    loop {
        match stop.recv_timeout(every) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let ended = ended.lock();
        if *ended || state.cancel.cause().is_some() {
            break;
        }
        let renewed = match ctx.pool.get() {
            Ok(mut client) => state.renew(&mut *client, claim, &ctx.queue, &ctx.events),
            // No connection is a failed renewal: retried once within the lease (W3).
            Err(_) => state.renewal_failed(claim, &ctx.events),
        };
        if renewed.is_err() {
            break;
        }
    }
    // Nothing is ever sent on `stop`: this returns when the pass drops its `Lease`.
    let _ = stop.recv();
}

/// Names the calling thread (as `top -H` and gdb show it); Linux keeps the first 15 bytes.
fn name_this_thread(name: &str) {
    let mut bytes: Vec<u8> = name.bytes().filter(|b| *b != 0).take(15).collect();
    bytes.push(0);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from the pointer,
    // which `bytes` is for the duration of the call; it names the calling thread only.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, bytes.as_ptr() as libc::c_ulong, 0, 0, 0);
    }
}
