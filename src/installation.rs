//! The Installation configuration file, named by `OCC_INSTALLATION_CONFIG` (SPEC §8): the
//! Installation's driver selections beside the Compute Driver, read by the worker at start-up.
//!
//! This module owns the file's JSON shape and its validation (SPEC H1, S1, §13): lifecycle
//! hooks, the Sandbox Driver and its egress ceiling, the Credential Gateway. Unknown keys are
//! refused naming the key, and every other problem is one line naming the entry
//! (`lifecycleHooks[1].timeoutSeconds …`); all of them are reported at once. It reads the one
//! file it is given and the CA files its hooks name, and never talks to anything.
//!
//! Keys:
//! - `lifecycleHooks` (optional): `[{driver: configuration | sandbox | iam, url, caFile, phases,
//!   timeoutSeconds}]`, at most one entry per driver, kept in H2 order (Configuration, Sandbox,
//!   IAM) whatever the file's order (SPEC H1, H2).
//! - `sandbox` (optional): `{id, implementation: kubernetes-sandbox, facets,
//!   runtimeClassName?}`; needs the Kubernetes Compute Driver (SPEC S1).
//! - `sandboxNetworkPolicyCeiling` (optional): `[{cidr, ports}]`, the widest egress an Agent's
//!   sandbox policy may allow (SPEC S1, S3).
//! - `credentialGateway` (optional): `{id, implementation: kubernetes-secret-gateway}`; needs
//!   the Kubernetes Compute Driver and `sandbox` (SPEC §13).
//! - `credentialProxy`: no Credential Proxy is built in, so naming one is an error (SPEC §13).
//! - `repositoryPolicy` (optional): `{id, implementation: occ-repository-policy}`, the built-in
//!   repository policy (SPEC G6, G19); needs `repositorySender`.
//! - `repositorySender` (optional): `{id, url, caFile, timeoutSeconds?,
//!   maintenanceIntervalSeconds?, durableBrokerReceipts?}`, the native repository sender the
//!   worker calls over HTTPS (SPEC G6, G20); needs `repositoryPolicy`, the Kubernetes Compute
//!   Driver and `sandbox`.

use crate::compute::cidr::canonical_cidr;
use crate::compute::hooks::{HookDriver, HookEntry, LifecycleHooks, Phase};
use crate::compute::sandbox::{EgressRule, Sandbox};
use crate::compute::ComputeDriver;
use crate::compute::Facet;
use crate::config::DriverKind;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The variable naming the file; every error begins with it.
pub const VARIABLE: &str = "OCC_INSTALLATION_CONFIG";
/// The largest file read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// A hook's `timeoutSeconds` when the entry leaves it out (as Kubernetes admission webhooks).
pub const DEFAULT_HOOK_TIMEOUT_SECONDS: u64 = 10;
/// The longest `timeoutSeconds` a hook may have.
pub const MAX_HOOK_TIMEOUT_SECONDS: u64 = 30;
/// The only Sandbox Driver implementation (SPEC §15).
pub const SANDBOX_IMPLEMENTATION: &str = "kubernetes-sandbox";
/// The only Credential Gateway implementation (SPEC §13).
pub const CREDENTIAL_GATEWAY_IMPLEMENTATION: &str = "kubernetes-secret-gateway";
/// The only repository policy implementation: the built-in one in PostgreSQL (SPEC G19).
pub const REPOSITORY_POLICY_IMPLEMENTATION: &str = "occ-repository-policy";
/// The cleanup interval without a sender's `maintenanceIntervalSeconds` (SPEC G6).
pub const DEFAULT_CLEANUP_INTERVAL: Duration = Duration::from_secs(30);

/// The validated selections. `Installation::default()` selects nothing (the variable unset).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Installation {
    /// In H2 order: Configuration, Sandbox, IAM.
    pub lifecycle_hooks: Vec<HookEntry>,
    pub sandbox: Option<Sandbox>,
    pub sandbox_network_policy_ceiling: Vec<EgressRule>,
    pub credential_gateway: Option<CredentialGateway>,
    pub repository_policy: Option<RepositoryPolicy>,
    pub repository_sender: Option<RepositorySenderEntry>,
}

/// What the worker's passes need of the sandbox selections (SPEC S1, S3): the Sandbox Driver,
/// if one is selected, and the egress ceiling. The default selects nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxSelection {
    pub driver: Option<Sandbox>,
    pub ceiling: Vec<EgressRule>,
}

/// Whether `egress` lies within `ceiling` (SPEC S3): each entry's network inside the network
/// of a ceiling entry whose ports include all of its ports.
pub fn within(egress: &[EgressRule], ceiling: &[EgressRule]) -> bool {
    egress.iter().all(|e| {
        ceiling.iter().any(|c| {
            network_within(&e.cidr, &c.cidr) && e.ports.iter().all(|p| c.ports.contains(p))
        })
    })
}

/// A canonical `address/prefix` as (family, address bits, prefix).
fn network(cidr: &str) -> Option<(bool, u128, u32)> {
    let (address, prefix) = cidr.split_once('/')?;
    let prefix: u32 = prefix.parse().ok()?;
    match address.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(a) => Some((false, u128::from(u32::from(a)) << 96, prefix)),
        std::net::IpAddr::V6(a) => Some((true, u128::from(a), prefix)),
    }
}

fn network_within(inner: &str, outer: &str) -> bool {
    let (Some((v6, inner_bits, inner_prefix)), Some((outer_v6, outer_bits, outer_prefix))) =
        (network(inner), network(outer))
    else {
        return false;
    };
    if v6 != outer_v6 || inner_prefix < outer_prefix || outer_prefix > 128 {
        return false;
    }
    // Both families keep their address in the top bits, so a prefix is the top bits.
    let mask = if outer_prefix == 0 {
        0
    } else {
        u128::MAX << (128 - outer_prefix)
    };
    (inner_bits & mask) == (outer_bits & mask)
}

/// Egress entries as JSON (SPEC S3).
pub fn egress_json(rules: &[EgressRule]) -> serde_json::Value {
    serde_json::Value::Array(rules.iter().map(EgressRule::to_json).collect())
}

/// An egress allowlist `[{cidr, ports}]` in `text` (a sandbox policy file, SPEC S3), validated as
/// the ceiling's entries are; every problem is one line naming the entry.
pub fn parse_egress(text: &str) -> Result<Vec<EgressRule>, InstallationError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let raw: Vec<RawEgressRule> = serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|e| InstallationError::new(vec![e.to_string()]).said_of("egress"))?;
    deserializer
        .end()
        .map_err(|e| InstallationError::new(vec![e.to_string()]).said_of("egress"))?;
    let mut problems = Vec::new();
    let rules = validate_egress("egress", raw, &mut problems);
    if problems.is_empty() {
        Ok(rules)
    } else {
        Err(InstallationError::new(problems).said_of("sandbox policy"))
    }
}

/// The selected Credential Gateway (SPEC §13).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialGateway {
    pub id: String,
}

/// The selected repository policy (SPEC G6): the built-in one, grants and standing approvals
/// in PostgreSQL (SPEC G19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepositoryPolicy {
    pub id: String,
}

/// The selected native repository sender (SPEC G6, G20): where and how the worker calls it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepositorySenderEntry {
    pub id: String,
    pub url: String,
    pub ca_file: PathBuf,
    /// The bundle `ca_file` held at start-up; the sender is verified against it only.
    pub ca_pem: Vec<u8>,
    /// Each call's bound but `ready`'s (SPEC G7, G20).
    pub timeout: Duration,
    /// The cleanup interval (SPEC G4, G6): `maintenanceIntervalSeconds`, else 30 s.
    pub cleanup_interval: Duration,
    /// Whether each health beat asks `ready` first (SPEC G7).
    pub durable_broker_receipts: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawInstallation {
    #[serde(default)]
    lifecycle_hooks: Vec<RawHook>,
    sandbox: Option<RawSandbox>,
    sandbox_network_policy_ceiling: Option<Vec<RawEgressRule>>,
    credential_gateway: Option<RawSelection>,
    credential_proxy: Option<serde_json::Value>,
    repository_policy: Option<RawSelection>,
    repository_sender: Option<RawRepositorySender>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawRepositorySender {
    id: String,
    url: String,
    ca_file: PathBuf,
    timeout_seconds: Option<u64>,
    maintenance_interval_seconds: Option<u64>,
    durable_broker_receipts: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawHook {
    driver: HookDriver,
    url: String,
    ca_file: PathBuf,
    phases: Vec<Phase>,
    timeout_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSandbox {
    id: String,
    implementation: String,
    facets: Vec<String>,
    runtime_class_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEgressRule {
    cidr: String,
    ports: Vec<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSelection {
    id: String,
    implementation: String,
}

/// Why the file was refused: one line per problem, each naming the entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallationError {
    /// `OCC_INSTALLATION_CONFIG` and, when loaded from a file, its path.
    origin: String,
    problems: Vec<String>,
}

impl InstallationError {
    fn new(problems: Vec<String>) -> InstallationError {
        InstallationError {
            origin: VARIABLE.to_string(),
            problems: problems.iter().map(|p| one_line(p)).collect(),
        }
    }

    fn at(mut self, path: &Path) -> InstallationError {
        self.origin = format!("{VARIABLE} {}", path.display());
        self
    }

    /// The same problems, said of `origin` instead of the file.
    fn said_of(mut self, origin: &str) -> InstallationError {
        self.origin = origin.to_string();
        self
    }

    /// Each problem, without the origin.
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

impl fmt::Display for InstallationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {problem}", self.origin)?;
        }
        Ok(())
    }
}

impl std::error::Error for InstallationError {}

impl Installation {
    /// The clients of the configured lifecycle hooks (SPEC H2), which the Compute Driver is
    /// built with; none configured, an empty set. A CA bundle holding no certificate is an
    /// error naming the variable.
    pub fn lifecycle_hooks(&self) -> Result<Arc<LifecycleHooks>, String> {
        LifecycleHooks::new(&self.lifecycle_hooks)
            .map(Arc::new)
            .map_err(|e| format!("{VARIABLE}: {e}"))
    }

    /// Checks the built Compute Driver offers what this Installation selects, before preflight:
    /// hooks need a driver that runs them (SPEC H2), a Sandbox Driver one that enforces it
    /// (SPEC S1). Each refusal is one line naming the variable.
    pub fn check_compute(&self, compute: &dyn ComputeDriver) -> Result<(), String> {
        if !self.lifecycle_hooks.is_empty() && compute.policy().lifecycle_hooks().is_none() {
            return Err(format!(
                "{VARIABLE}: lifecycleHooks: the {} Compute Driver ({}) runs no lifecycle hooks",
                compute.id(),
                compute.implementation()
            ));
        }
        if self.sandbox.is_some() && compute.sandbox().is_none() {
            return Err(format!(
                "{VARIABLE}: sandbox needs the kubernetes Compute Driver (OCC_COMPUTE_DRIVER)"
            ));
        }
        Ok(())
    }

    /// Reads and validates the file at `path` for a worker whose Compute Driver is `compute`;
    /// hook CA files are read relative to the working directory.
    pub fn load(path: &Path, compute: DriverKind) -> Result<Installation, InstallationError> {
        let text = crate::files::read_file(path, MAX_FILE_BYTES)
            .map_err(|e| InstallationError::new(vec![e.to_string()]).at(path))?;
        Installation::parse(&text, compute).map_err(|e| e.at(path))
    }

    /// Parses and validates the file's JSON.
    pub fn parse(text: &str, compute: DriverKind) -> Result<Installation, InstallationError> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let raw: RawInstallation =
            serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
                let inner_category = e.inner().classify();
                // A file cut short or not JSON at all has no key path to name (it would print
                // as `?`): the line and column say where.
                let path = match inner_category {
                    serde_json::error::Category::Eof | serde_json::error::Category::Syntax => {
                        String::new()
                    }
                    _ => e.path().to_string(),
                };
                let inner = e.into_inner();
                InstallationError::new(vec![if path == "." || path.is_empty() {
                    inner.to_string()
                } else {
                    format!("{path}: {inner}")
                }])
            })?;
        deserializer
            .end()
            .map_err(|e| InstallationError::new(vec![e.to_string()]))?;
        let mut problems = Vec::new();
        let installation = validate(raw, compute, &mut problems);
        if problems.is_empty() {
            Ok(installation)
        } else {
            Err(InstallationError::new(problems))
        }
    }

    /// The sandbox selections the worker's passes read (SPEC S1, S3).
    pub fn sandbox_selection(&self) -> SandboxSelection {
        SandboxSelection {
            driver: self.sandbox.clone(),
            ceiling: self.sandbox_network_policy_ceiling.clone(),
        }
    }

    /// The hooks subscribed to `phase`, in H2 order.
    pub fn hooks_for(&self, phase: Phase) -> impl Iterator<Item = &HookEntry> {
        self.lifecycle_hooks
            .iter()
            .filter(move |h| h.phases.contains(&phase))
    }
}

fn validate(raw: RawInstallation, compute: DriverKind, problems: &mut Vec<String>) -> Installation {
    let kubernetes = compute == DriverKind::Kubernetes;
    if raw.credential_proxy.is_some() {
        problems.push(
            "credentialProxy: no Credential Proxy is built in; leave the key out".to_string(),
        );
    }
    let sandbox = raw
        .sandbox
        .and_then(|s| validate_sandbox(s, kubernetes, problems));
    let ceiling = raw
        .sandbox_network_policy_ceiling
        .map(|rules| validate_egress("sandboxNetworkPolicyCeiling", rules, problems))
        .unwrap_or_default();
    let credential_gateway = raw.credential_gateway.and_then(|g| {
        let before = problems.len();
        if g.id.trim().is_empty() {
            problems.push("credentialGateway.id must not be blank".into());
        }
        if g.implementation != CREDENTIAL_GATEWAY_IMPLEMENTATION {
            problems.push(format!(
                "credentialGateway.implementation must be {CREDENTIAL_GATEWAY_IMPLEMENTATION}"
            ));
        }
        if !kubernetes {
            problems.push(
                "credentialGateway needs the kubernetes Compute Driver (OCC_COMPUTE_DRIVER)".into(),
            );
        }
        if sandbox.is_none() {
            problems.push("credentialGateway needs a sandbox selected".into());
        }
        (problems.len() == before).then_some(CredentialGateway { id: g.id })
    });
    let mut hooks = Vec::new();
    let mut seen = Vec::new();
    for (i, hook) in raw.lifecycle_hooks.into_iter().enumerate() {
        let at = format!("lifecycleHooks[{i}]");
        if seen.contains(&hook.driver) {
            problems.push(format!(
                "{at}: a second entry for driver {} (a driver has one hook set)",
                hook.driver.as_str()
            ));
            continue;
        }
        seen.push(hook.driver);
        if hook.driver == HookDriver::Sandbox && sandbox.is_none() {
            problems.push(format!(
                "{at}: driver sandbox needs a sandbox selected (the `sandbox` key)"
            ));
        }
        if let Some(entry) = validate_hook(&at, hook, problems) {
            hooks.push(entry);
        }
    }
    hooks.sort_by_key(|h| h.driver);
    let (repository_policy, repository_sender) = validate_repository(
        raw.repository_policy,
        raw.repository_sender,
        kubernetes,
        sandbox.is_some(),
        problems,
    );
    Installation {
        lifecycle_hooks: hooks,
        sandbox,
        sandbox_network_policy_ceiling: ceiling,
        credential_gateway,
        repository_policy,
        repository_sender,
    }
}

/// SPEC G6: the repository policy and sender, each needing the other, the sender the
/// Kubernetes Compute Driver and a sandbox.
fn validate_repository(
    policy: Option<RawSelection>,
    sender: Option<RawRepositorySender>,
    kubernetes: bool,
    sandbox: bool,
    problems: &mut Vec<String>,
) -> (Option<RepositoryPolicy>, Option<RepositorySenderEntry>) {
    let has_sender = sender.is_some();
    let has_policy = policy.is_some();
    let policy = policy.and_then(|p| {
        let before = problems.len();
        if p.id.trim().is_empty() {
            problems.push("repositoryPolicy.id must not be blank".into());
        }
        if p.implementation != REPOSITORY_POLICY_IMPLEMENTATION {
            problems.push(format!(
                "repositoryPolicy.implementation must be {REPOSITORY_POLICY_IMPLEMENTATION}, got {:?}",
                cut(&p.implementation)
            ));
        }
        if !has_sender {
            problems.push("repositoryPolicy needs a repositorySender selected".into());
        }
        (problems.len() == before).then_some(RepositoryPolicy { id: p.id })
    });
    let sender = sender.and_then(|s| {
        let before = problems.len();
        if s.id.trim().is_empty() {
            problems.push("repositorySender.id must not be blank".into());
        }
        check_https_url("repositorySender", &s.url, problems);
        let timeout = s.timeout_seconds.unwrap_or(DEFAULT_HOOK_TIMEOUT_SECONDS);
        if !(1..=MAX_HOOK_TIMEOUT_SECONDS).contains(&timeout) {
            problems.push(format!(
                "repositorySender.timeoutSeconds must be 1-{MAX_HOOK_TIMEOUT_SECONDS}, got {timeout}"
            ));
        }
        let interval = match s.maintenance_interval_seconds {
            Some(0) => {
                problems.push(
                    "repositorySender.maintenanceIntervalSeconds must be a positive integer, got 0"
                        .into(),
                );
                DEFAULT_CLEANUP_INTERVAL
            }
            Some(n) => Duration::from_secs(n),
            None => DEFAULT_CLEANUP_INTERVAL,
        };
        let ca_pem = read_ca("repositorySender", &s.ca_file, problems);
        if !kubernetes {
            problems.push(
                "repositorySender needs the kubernetes Compute Driver (OCC_COMPUTE_DRIVER)".into(),
            );
        }
        if !sandbox {
            problems.push("repositorySender needs a sandbox selected".into());
        }
        if !has_policy {
            problems.push("repositorySender needs a repositoryPolicy selected".into());
        }
        (problems.len() == before).then(|| RepositorySenderEntry {
            id: s.id,
            url: s.url,
            ca_file: s.ca_file,
            ca_pem,
            timeout: Duration::from_secs(timeout),
            cleanup_interval: interval,
            durable_broker_receipts: s.durable_broker_receipts.unwrap_or(false),
        })
    });
    (policy, sender)
}

fn validate_hook(at: &str, hook: RawHook, problems: &mut Vec<String>) -> Option<HookEntry> {
    let before = problems.len();
    if hook.phases.is_empty() {
        problems.push(format!("{at}.phases must name at least one phase"));
    }
    for (j, phase) in hook.phases.iter().enumerate() {
        if hook.phases[..j].contains(phase) {
            problems.push(format!("{at}.phases names {} twice", phase.as_str()));
        }
    }
    check_https_url(at, &hook.url, problems);
    let timeout = hook.timeout_seconds.unwrap_or(DEFAULT_HOOK_TIMEOUT_SECONDS);
    if !(1..=MAX_HOOK_TIMEOUT_SECONDS).contains(&timeout) {
        problems.push(format!(
            "{at}.timeoutSeconds must be 1-{MAX_HOOK_TIMEOUT_SECONDS}, got {timeout}"
        ));
    }
    let ca_pem = read_ca(at, &hook.ca_file, problems);
    (problems.len() == before).then(|| HookEntry {
        driver: hook.driver,
        url: hook.url,
        ca_file: hook.ca_file,
        ca_pem,
        phases: hook.phases,
        timeout: Duration::from_secs(timeout),
    })
}

/// `{at}.url` must be an `https://` URL with a host.
fn check_https_url(at: &str, url: &str, problems: &mut Vec<String>) {
    let url_ok = url
        .parse::<ureq::http::Uri>()
        .ok()
        .filter(|u| u.scheme_str() == Some("https") && u.host().is_some_and(|h| !h.is_empty()))
        .is_some();
    if !url_ok {
        problems.push(format!(
            "{at}.url must be an https:// URL with a host, got {:?}",
            cut(url)
        ));
    }
}

/// The PEM bundle `{at}.caFile` names, which must hold a certificate (empty after a problem).
fn read_ca(at: &str, path: &Path, problems: &mut Vec<String>) -> Vec<u8> {
    match std::fs::read(path) {
        Ok(pem) if pem_has_certificate(&pem) => pem,
        Ok(_) => {
            problems.push(format!(
                "{at}.caFile {} holds no PEM certificate",
                path.display()
            ));
            Vec::new()
        }
        Err(e) => {
            problems.push(format!(
                "{at}.caFile {} cannot be read ({e})",
                path.display()
            ));
            Vec::new()
        }
    }
}

/// Whether `pem` holds at least one certificate, and nothing unparseable.
fn pem_has_certificate(pem: &[u8]) -> bool {
    let mut certificates = 0;
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(_)) => certificates += 1,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    certificates > 0
}

fn validate_sandbox(
    raw: RawSandbox,
    kubernetes: bool,
    problems: &mut Vec<String>,
) -> Option<Sandbox> {
    let before = problems.len();
    if !kubernetes {
        problems.push("sandbox needs the kubernetes Compute Driver (OCC_COMPUTE_DRIVER)".into());
    }
    if raw.id.trim().is_empty() {
        problems.push("sandbox.id must not be blank".into());
    }
    if raw.implementation != SANDBOX_IMPLEMENTATION {
        problems.push(format!(
            "sandbox.implementation must be {SANDBOX_IMPLEMENTATION}, got {:?}",
            cut(&raw.implementation)
        ));
    }
    let known = || {
        Facet::ALL
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if raw.facets.is_empty() {
        problems.push(format!(
            "sandbox.facets must name at least one of {}",
            known()
        ));
    }
    let mut facets = Vec::new();
    for (i, name) in raw.facets.iter().enumerate() {
        match Facet::parse(name) {
            None => problems.push(format!(
                "sandbox.facets[{i}] {:?} is not a facet; known: {}",
                cut(name),
                known()
            )),
            Some(facet) if facets.contains(&facet) => {
                problems.push(format!("sandbox.facets names {name} twice"))
            }
            Some(facet) => facets.push(facet),
        }
    }
    let runtime_class = facets.contains(&Facet::RuntimeClass);
    match (&raw.runtime_class_name, runtime_class) {
        (None, true) => problems
            .push("sandbox.runtimeClassName is required when runtime-class is a facet".into()),
        (Some(_), false) => problems.push(
            "sandbox.runtimeClassName is set but runtime-class is not a facet; list the facet or leave the key out"
                .into(),
        ),
        (Some(name), true) if !is_dns_label(name) => problems.push(format!(
            "sandbox.runtimeClassName must be a DNS subdomain name, got {:?}",
            cut(name)
        )),
        _ => {}
    }
    (problems.len() == before).then_some(Sandbox {
        id: raw.id,
        facets,
        runtime_class_name: raw.runtime_class_name,
    })
}

/// Egress entries `{cidr, ports}`: a canonical network and non-empty TCP ports 1-65535.
fn validate_egress(
    key: &str,
    rules: Vec<RawEgressRule>,
    problems: &mut Vec<String>,
) -> Vec<EgressRule> {
    let mut valid = Vec::new();
    for (i, rule) in rules.into_iter().enumerate() {
        let cidr = canonical_cidr(&rule.cidr);
        if cidr.is_none() {
            problems.push(format!(
                "{key}[{i}].cidr must be an IPv4 or IPv6 network such as 10.0.0.0/8, its host bits zero"
            ));
        }
        if rule.ports.is_empty() {
            problems.push(format!("{key}[{i}].ports must name at least one port"));
        }
        let ports: Vec<u16> = rule
            .ports
            .iter()
            .filter_map(|&p| u16::try_from(p).ok().filter(|&p| p > 0))
            .collect();
        if ports.len() != rule.ports.len() {
            problems.push(format!("{key}[{i}].ports must be TCP ports 1-65535"));
        }
        if let Some(cidr) = cidr {
            valid.push(EgressRule { cidr, ports });
        }
    }
    valid
}

/// A DNS subdomain name (RFC 1123), as Kubernetes names objects.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part.len() <= 63
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A value echoed in an error, cut to 64 characters with its length.
fn cut(value: &str) -> String {
    if value.chars().count() <= 64 {
        value.to_string()
    } else {
        let head: String = value.chars().take(64).collect();
        format!("{head}… ({} bytes)", value.len())
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
