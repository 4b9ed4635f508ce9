//! The one integration-test binary: every module is a behaviour area, every test isolated in
//! its own database.

mod agent;
mod agent_driver;
mod docker;
mod docker_fake;
mod docker_proxy;
mod e2e;
mod iam;
mod namespace;
mod queue_smoke;
mod revision;
mod scripted;
mod support;
