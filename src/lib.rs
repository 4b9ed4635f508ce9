//! occ-worker: the controller worker of a multi-tenant agent platform.
//!
//! It claims durable Namespace and Agent operations from PostgreSQL, re-checks authorization
//! before every effect, and drives infrastructure through a Compute Driver. See
//! `ARCHITECTURE.md` for the map; every module opens with what it owns.

pub mod audit;
pub mod cancel;
pub mod compute;
pub mod config;
pub mod credentials;
pub mod db;
pub mod events;
pub mod files;
pub mod health;
pub mod iam;
pub mod installation;
pub mod metrics;
pub mod migrate;
pub mod operator;
pub mod queue;
pub mod reconcile;
pub mod repository;
pub mod runtime;
pub mod secret;
pub mod variable;
