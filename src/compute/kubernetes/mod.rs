//! The Kubernetes Compute Driver (SPEC C3) over the REST API: blocking HTTP with rustls, no
//! async runtime, no client library beyond `ureq`.
//!
//! `connection` finds the API server and credentials (in-cluster or kubeconfig), `exec` runs
//! credential plugins, both failing with `connection_error::ConnectionError`, `client`
//! sends requests and types their errors, `settings` reads the driver file, `names` derives
//! object names and labels, `manifests` builds the objects, `observe` reads their status, `sandbox` builds and checks what the
//! Sandbox Driver enforces (SPEC §15), and `driver` implements `ComputeDriver` with them. Nothing here touches the database.

pub mod client;
pub mod connection;
pub mod connection_error;
pub mod driver;
pub mod exec;
pub mod manifests;
pub mod names;
pub mod observe;
pub mod sandbox;
pub mod settings;

pub use driver::KubernetesDriver;
