//! The heartbeat thread of one live claim (SPEC W1-W3): `occ-lease-<work id>`.
//!
//! It renews every `lease/3` through `LeaseState::renew`, which cancels the pass on a refused
//! or late renewal, or on the second failed renewal in a row (one is retried within the lease); a lapse is caught by the token itself at the next cancellation
//! point. The thread is stopped by dropping the `Lease` (its channel closes) and is joined
//! there. It never publishes anything.

use crate::queue::Claim;
use crate::reconcile::{Context, LeaseState};
use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct Lease {
    // Declared before the handle: dropping the sender is what stops the thread, so it must
    // happen before the join in `Drop`.
    stop: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Lease {
    pub fn start(
        claim: Claim,
        state: Arc<LeaseState>,
        ctx: Arc<Context>,
    ) -> std::io::Result<Lease> {
        let (stop, stopped) = bounded::<()>(0);
        let every = (ctx.queue.lease / 3).max(std::time::Duration::from_millis(1));
        let handle = std::thread::Builder::new()
            .name(format!("occ-lease-{}", claim.id))
            .spawn(move || loop {
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                if state.cancel.cause().is_some() {
                    return;
                }
                let renewed = match ctx.pool.get() {
                    Ok(mut client) => state.renew(&mut *client, &claim, &ctx.queue, &ctx.events),
                    // No connection is a failed renewal: retried once within the lease (W3).
                    Err(_) => state.renewal_failed(&claim, &ctx.events),
                };
                if renewed.is_err() {
                    return;
                }
            })?;
        Ok(Lease {
            stop: Some(stop),
            handle: Some(handle),
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
