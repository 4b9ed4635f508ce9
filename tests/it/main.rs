//! The one integration-test binary: every module is a behaviour area, every test isolated in
//! its own database.

mod agent;
mod behaviours;
mod cli;
mod conventions;
mod deploy;
mod docker;
mod docker_fake;
mod docker_proxy;
mod docker_subnets;
mod e2e;
mod effects;
mod harness;
mod health;
mod iam;
mod kube_e2e;
mod kube_fake;
mod kube_fake_tests;
mod kubernetes;
mod lanes;
mod managed;
mod migrate;
mod namespace;
mod outage;
mod queue;
mod queue_engine;
mod queue_smoke;
mod readme;
mod revision;
mod round_trips;
mod runtime;
mod scripted;
mod scripts;
mod stall;
mod support;
mod tls;
