//! The one integration-test binary: every module is a behaviour area, every test isolated in
//! its own database.

mod support;
mod queue_smoke;
