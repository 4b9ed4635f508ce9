//! The Kubernetes driver's settings file, named by `OCC_KUBERNETES_CONFIG` (SPEC C3).
//!
//! This module owns the file's JSON shape, its documented defaults and its validation: images
//! per harness id, version and mode, the token audience and expiry, workload resources, Harness
//! claim storage, the tenant RoleBinding name, the namespace prefix, the user workloads run
//! as, the maintenance interval and the execution admissions it runs. Unknown keys are refused, so a misspelt key is an error
//! rather than a silently applied default. Every error is one line naming the file and the
//! key. It must never talk to Kubernetes and never read anything but the one file it is given.
//!
//! Keys and defaults:
//! - `tenantRoleBinding` (required): the RoleBinding an operator provisions in each namespace.
//! - `tokenAudience` (required): the audience of the Agent's projected token.
//! - `harnesses` (required): `[{id, version, mode: dedicated|embedded, image}]`, unique by
//!   (id, version, mode).
//! - `gatewayImage` (required when a harness is `dedicated`): the image of the Agent's shared
//!   single-replica gateway in front of its dedicated Harness.
//! - `workspaceSetupImage` (optional): the image of the `workspace-setup` init container of a
//!   dedicated Harness whose Agent has a workspace setup (SPEC WS2, WS3). Absent: an Agent with
//!   a setup is refused `WORKSPACE_SETUP_UNSUPPORTED`.
//! - `namespacePrefix` (default `occ-`): prepended to Namespace ids.
//! - `tokenExpirationSeconds` (default 3600, at least 600): projected token lifetime.
//! - `resources` (default requests cpu `100m` memory `256Mi`, limits cpu `1` memory `1Gi`).
//! - `harnessClaim` (`storageClassName` optional, cluster default when absent; `size` default
//!   `1Gi`).
//! - `runAsUser` (default 10001, greater than 0).
//! - `maintenanceIntervalSeconds` (optional, greater than 0): none when absent.
//! - `qps` (default 20, greater than 0) and `burst` (default 40, at least 1): the client-side
//!   rate limit of every request this process sends, shared by its threads (client-go's
//!   defaults are 5 and 10; a worker sends a few requests per pass).
//! - `apiServerCidrs` (optional, at least one IPv4 or IPv6 network, host bits zero): the
//!   networks the API server's connections to Pods come from; the default-deny NetworkPolicy
//!   admits them to the harness port, so the driver can read a held failure's `/readyz`
//!   through the API server's Pod proxy (SPEC C3, R5). Absent: no ingress at all, and a held
//!   failure is known from the termination log only.
//! - `executionAdmissions` (default `[{"version": 5, "mode": "standard"}]`, at least one,
//!   unique; `version` greater than 0, `mode` `^[a-z][a-z_]{0,31}$`): the stored execution
//!   admissions this driver runs (SPEC Z1). A revision whose admission is not listed is refused
//!   (`EXECUTION_ADMISSION_UNAVAILABLE`), and a running active one is stopped
//!   (`EXECUTION_ADMISSION_WITHDRAWN`): removing a pair here withdraws its revisions.

use crate::compute::cidr::canonical_cidr;
use crate::compute::spec::HarnessMode;
use crate::compute::ExecutionAdmission;
use crate::files::FileError;
use serde::Deserialize;
use std::fmt;

use std::path::Path;
use std::time::Duration;

/// The variable naming the settings file; every error begins with it.
pub const VARIABLE: &str = "OCC_KUBERNETES_CONFIG";
/// The largest settings file read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The shortest projected token lifetime Kubernetes accepts.
pub const MIN_TOKEN_EXPIRATION_SECONDS: u64 = 600;

/// The validated driver settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub tenant_role_binding: String,
    pub token_audience: String,
    pub namespace_prefix: String,
    pub token_expiration_seconds: u64,
    pub resources: Resources,
    pub harness_claim: HarnessClaim,
    pub run_as_user: i64,
    pub maintenance_interval: Option<Duration>,
    pub harnesses: Vec<HarnessImage>,
    /// The dedicated topology's per-Agent gateway image.
    pub gateway_image: Option<String>,
    /// The image that runs an Agent's workspace setup (SPEC WS3), when the driver runs any.
    pub workspace_setup_image: Option<String>,
    /// Requests per second the client sends at most, on average.
    pub qps: f64,
    /// Requests the client may send at once after an idle moment.
    pub burst: u32,
    /// The API server's networks the default-deny NetworkPolicy admits to the harness port, in
    /// canonical form (`10.0.0.0/8`); empty when the file names none.
    pub api_server_cidrs: Vec<String>,
    /// The stored execution admissions the driver runs (SPEC Z1).
    pub execution_admissions: Vec<ExecutionAdmission>,
}

/// Container resource requests and limits.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default = "default_requests")]
    pub requests: Quantities,
    #[serde(default = "default_limits")]
    pub limits: Quantities,
}

/// A cpu and a memory quantity, e.g. `100m` and `256Mi`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quantities {
    pub cpu: String,
    pub memory: String,
}

/// The Harness's PersistentVolumeClaim.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HarnessClaim {
    /// The StorageClass; the cluster's default when absent.
    #[serde(default)]
    pub storage_class_name: Option<String>,
    #[serde(default = "default_claim_size")]
    pub size: String,
}

/// The image of one harness id, version and mode.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessImage {
    pub id: String,
    pub version: String,
    pub mode: HarnessMode,
    pub image: String,
}

/// The file as written, before defaults are checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSettings {
    tenant_role_binding: String,
    token_audience: String,
    harnesses: Vec<HarnessImage>,
    #[serde(default)]
    gateway_image: Option<String>,
    #[serde(default)]
    workspace_setup_image: Option<String>,
    #[serde(default = "default_prefix")]
    namespace_prefix: String,
    #[serde(default = "default_token_expiration")]
    token_expiration_seconds: u64,
    #[serde(default = "default_resources")]
    resources: Resources,
    #[serde(default = "default_claim")]
    harness_claim: HarnessClaim,
    #[serde(default = "default_run_as_user")]
    run_as_user: i64,
    #[serde(default)]
    maintenance_interval_seconds: Option<u64>,
    #[serde(default = "default_qps")]
    qps: f64,
    #[serde(default = "default_burst")]
    burst: u32,
    #[serde(default)]
    api_server_cidrs: Option<Vec<String>>,
    #[serde(default = "default_execution_admissions")]
    execution_admissions: Vec<ExecutionAdmission>,
}

fn default_execution_admissions() -> Vec<ExecutionAdmission> {
    vec![ExecutionAdmission::standard()]
}

fn default_qps() -> f64 {
    20.0
}
fn default_burst() -> u32 {
    40
}

fn default_prefix() -> String {
    "occ-".to_string()
}
fn default_token_expiration() -> u64 {
    3600
}
fn default_requests() -> Quantities {
    Quantities {
        cpu: "100m".to_string(),
        memory: "256Mi".to_string(),
    }
}
fn default_limits() -> Quantities {
    Quantities {
        cpu: "1".to_string(),
        memory: "1Gi".to_string(),
    }
}
fn default_resources() -> Resources {
    Resources {
        requests: default_requests(),
        limits: default_limits(),
    }
}
fn default_claim_size() -> String {
    "1Gi".to_string()
}
fn default_claim() -> HarnessClaim {
    HarnessClaim {
        storage_class_name: None,
        size: default_claim_size(),
    }
}
fn default_run_as_user() -> i64 {
    10001
}

/// What went wrong with the settings file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettingsErrorKind {
    /// The file could not be read.
    Io,
    /// The file is larger than `MAX_FILE_BYTES`.
    TooLarge,
    /// The file is not JSON of the expected shape (syntax, unknown or missing key, wrong type).
    Malformed,
    /// A value is out of its documented range.
    Invalid,
}

/// A settings error: one line, `OCC_KUBERNETES_CONFIG <path>: <what, naming the key>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    kind: SettingsErrorKind,
    /// `OCC_KUBERNETES_CONFIG` and, when loaded from a file, its path.
    origin: String,
    detail: String,
}

impl SettingsError {
    fn new(kind: SettingsErrorKind, detail: impl Into<String>) -> SettingsError {
        SettingsError {
            kind,
            origin: VARIABLE.to_string(),
            detail: one_line(&detail.into()),
        }
    }

    fn at(mut self, path: &Path) -> SettingsError {
        self.origin = format!("{VARIABLE} {}", path.display());
        self
    }

    pub fn kind(&self) -> SettingsErrorKind {
        self.kind
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.detail)
    }
}

impl std::error::Error for SettingsError {}

impl Settings {
    /// Reads and validates the settings file at `path` (at most `MAX_FILE_BYTES`).
    pub fn load(path: &Path) -> Result<Settings, SettingsError> {
        let text = crate::files::read_file(path, MAX_FILE_BYTES).map_err(|e| {
            let kind = match e {
                FileError::Io(_) => SettingsErrorKind::Io,
                FileError::TooLarge(_) => SettingsErrorKind::TooLarge,
            };
            SettingsError::new(kind, e.to_string()).at(path)
        })?;
        Settings::parse(&text).map_err(|e| e.at(path))
    }

    /// Parses and validates settings JSON.
    pub fn parse(text: &str) -> Result<Settings, SettingsError> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let raw: RawSettings =
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
                let detail = if path == "." || path.is_empty() {
                    inner.to_string()
                } else {
                    format!("{path}: {inner}")
                };
                SettingsError::new(SettingsErrorKind::Malformed, detail)
            })?;
        deserializer
            .end()
            .map_err(|e| SettingsError::new(SettingsErrorKind::Malformed, e.to_string()))?;
        validate(raw)
    }

    /// The image configured for a harness id, version and mode (`dedicated` or `embedded`).
    pub fn image_for(&self, id: &str, version: &str, mode: HarnessMode) -> Option<&str> {
        self.harnesses
            .iter()
            .find(|h| h.id == id && h.version == version && h.mode == mode)
            .map(|h| h.image.as_str())
    }
}

fn invalid(detail: impl Into<String>) -> SettingsError {
    SettingsError::new(SettingsErrorKind::Invalid, detail)
}

fn validate(raw: RawSettings) -> Result<Settings, SettingsError> {
    require_name("tenantRoleBinding", &raw.tenant_role_binding)?;
    require_text("tokenAudience", &raw.token_audience)?;
    if !valid_prefix(&raw.namespace_prefix) {
        return Err(invalid(
            "namespacePrefix must be 1 to 20 lower-case letters, digits or '-', starting with a letter",
        ));
    }
    if raw.token_expiration_seconds < MIN_TOKEN_EXPIRATION_SECONDS {
        return Err(invalid(format!(
            "tokenExpirationSeconds must be at least {MIN_TOKEN_EXPIRATION_SECONDS}"
        )));
    }
    for (key, value) in [
        ("resources.requests.cpu", &raw.resources.requests.cpu),
        ("resources.requests.memory", &raw.resources.requests.memory),
        ("resources.limits.cpu", &raw.resources.limits.cpu),
        ("resources.limits.memory", &raw.resources.limits.memory),
        ("harnessClaim.size", &raw.harness_claim.size),
    ] {
        if !is_quantity(value) {
            return Err(invalid(format!(
                "{key} must be a Kubernetes quantity such as 500m, 1 or 256Mi"
            )));
        }
    }
    if let Some(class) = &raw.harness_claim.storage_class_name {
        require_name("harnessClaim.storageClassName", class)?;
    }
    if raw.run_as_user <= 0 {
        return Err(invalid("runAsUser must be greater than 0"));
    }
    let maintenance_interval = match raw.maintenance_interval_seconds {
        Some(0) => return Err(invalid("maintenanceIntervalSeconds must be greater than 0")),
        seconds => seconds.map(Duration::from_secs),
    };
    if !(raw.qps.is_finite() && raw.qps > 0.0) {
        return Err(invalid("qps must be a number greater than 0"));
    }
    if raw.burst == 0 {
        return Err(invalid("burst must be at least 1"));
    }
    validate_harnesses(&raw.harnesses)?;
    match &raw.gateway_image {
        Some(image) => require_text("gatewayImage", image)?,
        None if raw.harnesses.iter().any(|h| h.mode == HarnessMode::Dedicated) => {
            return Err(invalid(
                "gatewayImage is required when a harness has mode dedicated (the Agent's gateway in front of its Harness)",
            ))
        }
        None => {}
    }
    if let Some(image) = &raw.workspace_setup_image {
        require_text("workspaceSetupImage", image)?;
    }
    let api_server_cidrs = match &raw.api_server_cidrs {
        None => Vec::new(),
        Some(cidrs) => validate_cidrs(cidrs)?,
    };
    validate_execution_admissions(&raw.execution_admissions)?;
    Ok(Settings {
        tenant_role_binding: raw.tenant_role_binding,
        token_audience: raw.token_audience,
        namespace_prefix: raw.namespace_prefix,
        token_expiration_seconds: raw.token_expiration_seconds,
        resources: raw.resources,
        harness_claim: raw.harness_claim,
        run_as_user: raw.run_as_user,
        maintenance_interval,
        harnesses: raw.harnesses,
        gateway_image: raw.gateway_image,
        workspace_setup_image: raw.workspace_setup_image,
        qps: raw.qps,
        burst: raw.burst,
        api_server_cidrs,
        execution_admissions: raw.execution_admissions,
    })
}

/// `executionAdmissions`: at least one, unique, each within the stored shape (SPEC Z1).
fn validate_execution_admissions(admissions: &[ExecutionAdmission]) -> Result<(), SettingsError> {
    if admissions.is_empty() {
        return Err(invalid(
            "executionAdmissions must name at least one {version, mode}",
        ));
    }
    for (i, a) in admissions.iter().enumerate() {
        if a.version == 0 || !ExecutionAdmission::valid_mode(&a.mode) {
            return Err(invalid(format!(
                "executionAdmissions[{i}] must have a version greater than 0 and a mode of 1 to 32 lower-case letters or '_', starting with a letter"
            )));
        }
        if admissions[..i].contains(a) {
            return Err(invalid(format!(
                "executionAdmissions[{i}] repeats version {} mode {}",
                a.version, a.mode
            )));
        }
    }
    Ok(())
}

/// `apiServerCidrs`: at least one network, each in canonical form.
fn validate_cidrs(cidrs: &[String]) -> Result<Vec<String>, SettingsError> {
    if cidrs.is_empty() {
        return Err(invalid(
            "apiServerCidrs must name at least one network, or be left out",
        ));
    }
    cidrs
        .iter()
        .enumerate()
        .map(|(i, cidr)| {
            canonical_cidr(cidr).ok_or_else(|| {
                invalid(format!(
                    "apiServerCidrs[{i}] must be an IPv4 or IPv6 network such as 10.0.0.0/8, its host bits zero"
                ))
            })
        })
        .collect()
}

fn validate_harnesses(harnesses: &[HarnessImage]) -> Result<(), SettingsError> {
    for (i, harness) in harnesses.iter().enumerate() {
        require_text(&format!("harnesses[{i}].id"), &harness.id)?;
        require_text(&format!("harnesses[{i}].version"), &harness.version)?;
        require_text(&format!("harnesses[{i}].image"), &harness.image)?;
        let duplicate = harnesses[..i]
            .iter()
            .any(|h| h.id == harness.id && h.version == harness.version && h.mode == harness.mode);
        if duplicate {
            return Err(invalid(format!(
                "harnesses[{i}] repeats id {:?} version {:?} mode {}",
                harness.id,
                harness.version,
                harness.mode.as_str()
            )));
        }
    }
    Ok(())
}

/// A non-empty value without whitespace or control characters, at most 1024 bytes.
fn require_text(key: &str, value: &str) -> Result<(), SettingsError> {
    if value.is_empty()
        || value.len() > 1024
        || value.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(invalid(format!(
            "{key} must be non-empty, without whitespace, at most 1024 bytes"
        )));
    }
    Ok(())
}

/// A Kubernetes object name (DNS-1123 subdomain).
fn require_name(key: &str, value: &str) -> Result<(), SettingsError> {
    let valid =
        !value.is_empty() && value.len() <= 253 && value.split('.').all(super::names::is_dns_label);
    if !valid {
        return Err(invalid(format!(
            "{key} must be a Kubernetes object name (lower-case letters, digits, '-' and '.')"
        )));
    }
    Ok(())
}

fn valid_prefix(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.len() <= 20
        && prefix.starts_with(|c: char| c.is_ascii_lowercase())
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A plain Kubernetes quantity: a decimal number and an optional SI or binary suffix.
fn is_quantity(value: &str) -> bool {
    const SUFFIXES: [&str; 13] = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "m", "k", "M", "G", "T", "P", "E",
    ];
    let number = SUFFIXES
        .iter()
        .find_map(|suffix| value.strip_suffix(suffix))
        .unwrap_or(value);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    !whole.is_empty()
        && whole.chars().all(|c| c.is_ascii_digit())
        && fraction.chars().all(|c| c.is_ascii_digit())
        && !(number.contains('.') && fraction.is_empty())
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"{"tenantRoleBinding":"occ-tenant","tokenAudience":"occ-agent","harnesses":[{"id":"codex","version":"1.2.0","mode":"dedicated","image":"registry/codex:1.2.0"},{"id":"openclaw","version":"1.0.0","mode":"embedded","image":"registry/openclaw:1.0.0"}],"gatewayImage":"registry/gateway:1.0.0"}"#;

    fn with(key_values: &str) -> String {
        format!("{},{key_values}}}", &MINIMAL[..MINIMAL.len() - 1])
    }

    fn error(text: &str) -> String {
        Settings::parse(text).unwrap_err().to_string()
    }

    // A file cut short names no key path (it used to print a stray `?:`): the line and column
    // say where it ends.
    #[test]
    fn a_truncated_file_names_where_it_ends_without_a_key_path() {
        let cut = &MINIMAL[..MINIMAL.find("\"harnesses\"").unwrap() + 20];
        assert_eq!(
            error(cut),
            "OCC_KUBERNETES_CONFIG: EOF while parsing a string at line 1 column 82"
        );
        assert_eq!(
            error("{\"tenantRoleBinding\": oops}"),
            "OCC_KUBERNETES_CONFIG: expected value at line 1 column 23"
        );
    }

    #[test]
    fn defaults_apply() {
        let s = Settings::parse(MINIMAL).unwrap();
        assert_eq!(s.namespace_prefix, "occ-");
        assert_eq!(s.token_expiration_seconds, 3600);
        assert_eq!(s.resources, default_resources());
        assert_eq!(s.harness_claim.size, "1Gi");
        assert_eq!(s.harness_claim.storage_class_name, None);
        assert_eq!(s.run_as_user, 10001);
        assert_eq!(s.maintenance_interval, None);
        assert_eq!(s.tenant_role_binding, "occ-tenant");
        assert_eq!(s.token_audience, "occ-agent");
        assert!(s.api_server_cidrs.is_empty());
        assert_eq!(s.execution_admissions, vec![ExecutionAdmission::standard()]);
    }

    // SPEC Z1: the execution admissions the driver runs, validated like the stored shape.
    #[test]
    fn z1_execution_admissions_are_validated() {
        let s = Settings::parse(&with(
            r#""executionAdmissions":[{"version":6,"mode":"protected"},{"version":5,"mode":"standard"}]"#,
        ))
        .unwrap();
        assert_eq!(s.execution_admissions.len(), 2);
        assert_eq!(s.execution_admissions[0].mode, "protected");
        for (bad, message) in [
            (r#"[]"#, "executionAdmissions must name at least one"),
            (
                r#"[{"version":0,"mode":"standard"}]"#,
                "executionAdmissions[0] must have",
            ),
            (
                r#"[{"version":5,"mode":"Standard"}]"#,
                "executionAdmissions[0] must have",
            ),
            (
                r#"[{"version":5,"mode":"_x"}]"#,
                "executionAdmissions[0] must have",
            ),
            (
                r#"[{"version":5,"mode":"standard"},{"version":5,"mode":"standard"}]"#,
                "executionAdmissions[1] repeats version 5 mode standard",
            ),
        ] {
            let e = error(&with(&format!(r#""executionAdmissions":{bad}"#)));
            assert!(e.contains(message), "{bad}: {e}");
        }
        let long = format!(r#"[{{"version":5,"mode":"{}"}}]"#, "a".repeat(33));
        assert!(error(&with(&format!(r#""executionAdmissions":{long}"#))).contains("must have"));
        let e = error(&with(
            r#""executionAdmissions":[{"version":5,"mode":"standard","egress":1}]"#,
        ));
        assert!(e.contains("egress"), "{e}");
    }

    // The API server's networks for the default-deny NetworkPolicy's one ingress rule: IPv4
    // or IPv6 networks, kept in canonical form; anything else is refused naming the entry.
    #[test]
    fn api_server_cidrs_are_networks() {
        let s = Settings::parse(&with(
            r#""apiServerCidrs":["10.0.0.0/8","172.18.0.2/32","FD00:0::/64","0.0.0.0/0"]"#,
        ))
        .unwrap();
        assert_eq!(
            s.api_server_cidrs,
            vec!["10.0.0.0/8", "172.18.0.2/32", "fd00::/64", "0.0.0.0/0"]
        );
        for (bad, index) in [
            (r#"["10.0.0.1/8"]"#, 0),
            (r#"["10.0.0.0/8","10.0.0.0"]"#, 1),
            (r#"["10.0.0.0/33"]"#, 0),
            (r#"["fd00::/129"]"#, 0),
            (r#"["10.0.0.0/"]"#, 0),
            (r#"["10.0.0.0/+8"]"#, 0),
            (r#"["kube-apiserver/32"]"#, 0),
            (r#"[" 10.0.0.0/8"]"#, 0),
        ] {
            assert_eq!(
                error(&with(&format!(r#""apiServerCidrs":{bad}"#))),
                format!("OCC_KUBERNETES_CONFIG: apiServerCidrs[{index}] must be an IPv4 or IPv6 network such as 10.0.0.0/8, its host bits zero"),
                "{bad}"
            );
        }
        assert_eq!(
            error(&with(r#""apiServerCidrs":[]"#)),
            "OCC_KUBERNETES_CONFIG: apiServerCidrs must name at least one network, or be left out"
        );
        let message = error(&with(r#""apiServerCidrs":"10.0.0.0/8""#));
        assert!(
            message.starts_with("OCC_KUBERNETES_CONFIG: apiServerCidrs: invalid type"),
            "{message}"
        );
    }

    #[test]
    fn images_are_found_by_id_version_and_mode() {
        let s = Settings::parse(MINIMAL).unwrap();
        assert_eq!(
            s.image_for("codex", "1.2.0", HarnessMode::Dedicated),
            Some("registry/codex:1.2.0")
        );
        assert_eq!(s.image_for("codex", "1.2.0", HarnessMode::Embedded), None);
        assert_eq!(s.image_for("codex", "1.2.1", HarnessMode::Dedicated), None);
        assert_eq!(
            s.image_for("openclaw", "1.0.0", HarnessMode::Embedded),
            Some("registry/openclaw:1.0.0")
        );
    }

    #[test]
    fn optional_keys_override_defaults() {
        let s = Settings::parse(&with(
            r#""namespacePrefix":"t1-","tokenExpirationSeconds":600,"resources":{"limits":{"cpu":"2","memory":"2Gi"}},"harnessClaim":{"storageClassName":"fast","size":"5Gi"},"runAsUser":2000,"maintenanceIntervalSeconds":300"#,
        ))
        .unwrap();
        assert_eq!(s.namespace_prefix, "t1-");
        assert_eq!(s.token_expiration_seconds, 600);
        assert_eq!(s.resources.requests, default_requests());
        assert_eq!(s.resources.limits.memory, "2Gi");
        assert_eq!(s.harness_claim.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(s.run_as_user, 2000);
        assert_eq!(s.maintenance_interval, Some(Duration::from_secs(300)));
    }

    #[test]
    fn errors_name_the_key() {
        assert_eq!(
            error(&with(r#""tokenExpirationSeconds":599"#)),
            "OCC_KUBERNETES_CONFIG: tokenExpirationSeconds must be at least 600"
        );
        assert_eq!(
            error(&with(r#""runAsUser":0"#)),
            "OCC_KUBERNETES_CONFIG: runAsUser must be greater than 0"
        );
        assert_eq!(
            error(&with(r#""maintenanceIntervalSeconds":0"#)),
            "OCC_KUBERNETES_CONFIG: maintenanceIntervalSeconds must be greater than 0"
        );
        assert_eq!(
            error(&with(r#""namespacePrefix":"OCC_""#)),
            "OCC_KUBERNETES_CONFIG: namespacePrefix must be 1 to 20 lower-case letters, digits or '-', starting with a letter"
        );
        assert_eq!(
            error(&with(r#""resources":{"requests":{"cpu":"lots","memory":"1Gi"}}"#)),
            "OCC_KUBERNETES_CONFIG: resources.requests.cpu must be a Kubernetes quantity such as 500m, 1 or 256Mi"
        );
        assert_eq!(
            error(r#"{"tokenAudience":"a","harnesses":[]}"#),
            "OCC_KUBERNETES_CONFIG: missing field `tenantRoleBinding` at line 1 column 36"
        );
        assert_eq!(
            error(&with(r#""tokenExpirationSeconds":"long""#)),
            "OCC_KUBERNETES_CONFIG: tokenExpirationSeconds: invalid type: string \"long\", expected u64 at line 1 column 318"
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let message = error(&with(r#""namespacePrefx":"x-""#));
        assert!(
            message.starts_with(
                "OCC_KUBERNETES_CONFIG: namespacePrefx: unknown field `namespacePrefx`"
            ),
            "{message}"
        );
        let message = error(
            r#"{"tenantRoleBinding":"r","tokenAudience":"a","harnesses":[{"id":"c","version":"1","mode":"shared","image":"i"}]}"#,
        );
        assert!(
            message
                .starts_with("OCC_KUBERNETES_CONFIG: harnesses[0].mode: unknown variant `shared`"),
            "{message}"
        );
    }

    #[test]
    fn ws3_a_workspace_setup_image_must_be_a_non_blank_reference() {
        assert_eq!(
            Settings::parse(MINIMAL).unwrap().workspace_setup_image,
            None
        );
        let with = MINIMAL.replace(
            r#""gatewayImage""#,
            r#""workspaceSetupImage":"registry/harness:1.2.0","gatewayImage""#,
        );
        assert_eq!(
            Settings::parse(&with)
                .unwrap()
                .workspace_setup_image
                .as_deref(),
            Some("registry/harness:1.2.0")
        );
        for bad in [r#""""#, r#""  ""#, r#""a b""#] {
            let file = MINIMAL.replace(
                r#""gatewayImage""#,
                &format!(r#""workspaceSetupImage":{bad},"gatewayImage""#),
            );
            assert_eq!(
                Settings::parse(&file).unwrap_err().to_string(),
                "OCC_KUBERNETES_CONFIG: workspaceSetupImage must be non-empty, without whitespace, at most 1024 bytes"
            );
        }
    }

    #[test]
    fn a_dedicated_harness_needs_the_gateway_image() {
        // SPEC C3: a dedicated Harness runs behind the Agent's shared gateway.
        let without = MINIMAL.replace(r#","gatewayImage":"registry/gateway:1.0.0""#, "");
        assert_eq!(
            error(&without),
            "OCC_KUBERNETES_CONFIG: gatewayImage is required when a harness has mode dedicated (the Agent's gateway in front of its Harness)"
        );
        let embedded_only = r#"{"tenantRoleBinding":"r","tokenAudience":"a","harnesses":[{"id":"o","version":"1","mode":"embedded","image":"i"}]}"#;
        assert_eq!(Settings::parse(embedded_only).unwrap().gateway_image, None);
        assert_eq!(
            error(&MINIMAL.replace("registry/gateway:1.0.0", "two words")),
            "OCC_KUBERNETES_CONFIG: gatewayImage must be non-empty, without whitespace, at most 1024 bytes"
        );
        assert_eq!(
            Settings::parse(MINIMAL).unwrap().gateway_image.as_deref(),
            Some("registry/gateway:1.0.0")
        );
    }

    #[test]
    fn duplicate_harnesses_are_refused() {
        let text = r#"{"tenantRoleBinding":"r","tokenAudience":"a","harnesses":[{"id":"c","version":"1","mode":"dedicated","image":"i"},{"id":"c","version":"1","mode":"embedded","image":"j"},{"id":"c","version":"1","mode":"dedicated","image":"k"}]}"#;
        assert_eq!(
            error(text),
            "OCC_KUBERNETES_CONFIG: harnesses[2] repeats id \"c\" version \"1\" mode dedicated"
        );
    }

    #[test]
    fn load_names_the_file() {
        let dir = std::env::temp_dir().join(format!("occ-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("k8s.json");
        std::fs::write(&path, with(r#""tokenExpirationSeconds":60"#)).unwrap();
        assert_eq!(
            Settings::load(&path).unwrap_err().to_string(),
            format!(
                "OCC_KUBERNETES_CONFIG {}: tokenExpirationSeconds must be at least 600",
                path.display()
            )
        );
        std::fs::write(&path, " ".repeat(MAX_FILE_BYTES as usize + 1)).unwrap();
        let err = Settings::load(&path).unwrap_err();
        assert_eq!(err.kind(), SettingsErrorKind::TooLarge);
        std::fs::write(&path, MINIMAL).unwrap();
        assert!(Settings::load(&path).is_ok());
        let missing = Settings::load(&dir.join("absent.json")).unwrap_err();
        assert_eq!(missing.kind(), SettingsErrorKind::Io);
        assert!(!missing.to_string().contains('\n'));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn quantities() {
        for ok in ["1", "100m", "0.5", "256Mi", "1Gi", "2k"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "m", "1.", ".5", "1 Gi", "-1", "1gi"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}
