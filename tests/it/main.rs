//! The one integration-test binary: every module is a behaviour area, every test isolated in
//! its own database.

mod conventions;
mod queue;
mod queue_smoke;
mod runtime;
mod support;
