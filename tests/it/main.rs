//! The one integration-test binary: every module is a behaviour area, every test isolated in
//! its own database.

mod docker;
mod docker_fake;
mod docker_proxy;
mod e2e;
mod iam;
mod namespace;
mod queue_smoke;
mod scripted;
mod support;
