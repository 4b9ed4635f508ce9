//! The one integration-test binary: every module is a behaviour area, every test isolated in
//! its own database.

mod agent;
mod agent_driver;
mod queue_smoke;
mod revision;
mod support;
