//! The one integration-test binary: every module is a behaviour area, every test isolated in
//! its own database.

mod conventions;
mod lanes;
mod queue;
mod queue_smoke;
mod runtime;
mod support;
