//! The fake API server's object store (test-only): the resource table, API paths, and the
//! verbs' semantics as a real API server keeps them — a global resourceVersion bumped by every
//! write, uid/creationTimestamp/generation, optimistic concurrency on PUT, merge patches, name
//! validation, namespace existence and termination, graceful deletion of pods and namespaces,
//! label and field selectors, and every error as a `Status` object.
//!
//! It knows nothing of HTTP, TLS or time passing; the controller advances what happens after a
//! write, and the server maps a request onto these calls.

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// How a resource's names are validated.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NameRule {
    /// RFC 1123 label: at most 63 of `[a-z0-9-]`, alphanumeric at both ends.
    Label,
    /// RFC 1035 label: as `Label`, starting with a letter (Services).
    Label1035,
    /// RFC 1123 subdomain: at most 253 characters, dot-separated labels.
    Subdomain,
}

/// One served resource.
#[derive(Debug)]
pub struct Resource {
    pub plural: &'static str,
    pub kind: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub namespaced: bool,
    pub names: NameRule,
    /// Has a status subresource: create and replace keep the server's status.
    pub has_status: bool,
}

const fn res(
    plural: &'static str,
    kind: &'static str,
    group: &'static str,
    version: &'static str,
    namespaced: bool,
    names: NameRule,
    has_status: bool,
) -> Resource {
    Resource {
        plural,
        kind,
        group,
        version,
        namespaced,
        names,
        has_status,
    }
}

use NameRule::{Label, Label1035, Subdomain};

pub static RESOURCES: &[Resource] = &[
    res("namespaces", "Namespace", "", "v1", false, Label, true),
    res(
        "serviceaccounts",
        "ServiceAccount",
        "",
        "v1",
        true,
        Subdomain,
        false,
    ),
    res("services", "Service", "", "v1", true, Label1035, true),
    res("pods", "Pod", "", "v1", true, Subdomain, true),
    res("secrets", "Secret", "", "v1", true, Subdomain, false),
    res("configmaps", "ConfigMap", "", "v1", true, Subdomain, false),
    res(
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        "",
        "v1",
        true,
        Subdomain,
        true,
    ),
    res(
        "deployments",
        "Deployment",
        "apps",
        "v1",
        true,
        Subdomain,
        true,
    ),
    res(
        "replicasets",
        "ReplicaSet",
        "apps",
        "v1",
        true,
        Subdomain,
        true,
    ),
    res(
        "networkpolicies",
        "NetworkPolicy",
        "networking.k8s.io",
        "v1",
        true,
        Subdomain,
        false,
    ),
    res(
        "rolebindings",
        "RoleBinding",
        "rbac.authorization.k8s.io",
        "v1",
        true,
        Subdomain,
        false,
    ),
    // Served for the operator's own manifests (`deploy/kubernetes`, applied by the tests'
    // `kubectl` stand-in); the driver never touches them.
    res(
        "clusterroles",
        "ClusterRole",
        "rbac.authorization.k8s.io",
        "v1",
        false,
        Subdomain,
        false,
    ),
    res(
        "clusterrolebindings",
        "ClusterRoleBinding",
        "rbac.authorization.k8s.io",
        "v1",
        false,
        Subdomain,
        false,
    ),
    res(
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        "policy",
        "v1",
        true,
        Subdomain,
        true,
    ),
    res(
        "runtimeclasses",
        "RuntimeClass",
        "node.k8s.io",
        "v1",
        false,
        Subdomain,
        false,
    ),
    res(
        "endpointslices",
        "EndpointSlice",
        "discovery.k8s.io",
        "v1",
        true,
        Subdomain,
        false,
    ),
];

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `deployments.apps`, or `pods` for the core group, as messages name a resource.
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

pub fn resource(plural: &str) -> &'static Resource {
    RESOURCES
        .iter()
        .find(|r| r.plural == plural)
        .unwrap_or_else(|| panic!("the fake does not serve {plural}"))
}

/// What an API path names: a collection (name `None`) or an item.
#[derive(Debug)]
pub struct Target {
    pub res: &'static Resource,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// Parses `/api/v1/...` and `/apis/GROUP/VERSION/...` paths (without the query).
pub fn parse_path(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let find = |plural: &str| {
        RESOURCES
            .iter()
            .find(|r| r.plural == plural && r.group == group && r.version == version)
    };
    let target = match rest {
        [plural] => Target {
            res: find(plural)?,
            namespace: None,
            name: None,
        },
        ["namespaces", name] => Target {
            res: find("namespaces")?,
            namespace: None,
            name: Some(name.to_string()),
        },
        ["namespaces", ns, plural] => Target {
            res: find(plural)?,
            namespace: Some(ns.to_string()),
            name: None,
        },
        ["namespaces", ns, plural, name] => Target {
            res: find(plural)?,
            namespace: Some(ns.to_string()),
            name: Some(name.to_string()),
        },
        [plural, name] => Target {
            res: find(plural)?,
            namespace: None,
            name: Some(name.to_string()),
        },
        _ => return None,
    };
    // A namespaced item needs its namespace; a cluster-scoped resource has none.
    if target.res.namespaced && target.name.is_some() && target.namespace.is_none() {
        return None;
    }
    if !target.res.namespaced && target.namespace.is_some() {
        return None;
    }
    Some(target)
}

/// An error answer: HTTP status and its `Status` body.
#[derive(Debug)]
pub struct ApiError {
    pub code: u16,
    pub body: Value,
}

pub fn status_body(code: u16, reason: &str, message: &str, details: Value) -> Value {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if !details.is_null() {
        body["details"] = details;
    }
    body
}

/// The reason a real API server gives with a bare status code.
pub fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        504 => "Timeout",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: &str, details: Value) -> ApiError {
        ApiError {
            code,
            body: status_body(code, reason, message, details),
        }
    }

    /// An injected or generic failure with only a code.
    pub fn plain(code: u16, message: &str) -> ApiError {
        ApiError::new(code, reason_for(code), message, Value::Null)
    }

    fn details(res: &Resource, name: &str) -> Value {
        let mut d = json!({"name": name, "kind": res.plural});
        if !res.group.is_empty() {
            d["group"] = json!(res.group);
        }
        d
    }

    pub fn not_found(res: &Resource, name: &str) -> ApiError {
        let message = format!("{} \"{name}\" not found", res.qualified());
        ApiError::new(404, "NotFound", &message, Self::details(res, name))
    }

    fn already_exists(res: &Resource, name: &str) -> ApiError {
        let message = format!("{} \"{name}\" already exists", res.qualified());
        ApiError::new(409, "AlreadyExists", &message, Self::details(res, name))
    }

    fn conflict(res: &Resource, name: &str, why: &str) -> ApiError {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            res.qualified()
        );
        ApiError::new(409, "Conflict", &message, Self::details(res, name))
    }

    pub fn bad_request(message: &str) -> ApiError {
        ApiError::new(400, "BadRequest", message, Value::Null)
    }

    fn invalid_name(res: &Resource, name: &str, cause_reason: &str, why: &str) -> ApiError {
        let field_message = if cause_reason == "FieldValueRequired" {
            format!("Required value: {why}")
        } else {
            format!("Invalid value: \"{name}\": {why}")
        };
        let message = format!(
            "{}{} \"{name}\" is invalid: metadata.name: {field_message}",
            res.kind,
            if res.group.is_empty() {
                String::new()
            } else {
                format!(".{}", res.group)
            }
        );
        let mut details = json!({
            "name": name,
            "kind": res.kind,
            "causes": [{"reason": cause_reason, "message": field_message, "field": "metadata.name"}],
        });
        if !res.group.is_empty() {
            details["group"] = json!(res.group);
        }
        ApiError::new(422, "Invalid", &message, details)
    }

    fn namespace_terminating(res: &Resource, name: &str, namespace: &str) -> ApiError {
        let message = format!(
            "{} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
            res.qualified()
        );
        let mut details = Self::details(res, name);
        details["causes"] = json!([{
            "reason": "NamespaceTerminating",
            "message": format!("namespace {namespace} is being terminated"),
            "field": "metadata.namespace",
        }]);
        ApiError::new(403, "Forbidden", &message, details)
    }
}

/// Why a name is not valid for the rule, if it is not.
fn name_problem(rule: NameRule, name: &str) -> Option<&'static str> {
    let label_ok = |l: &str, max: usize| {
        !l.is_empty()
            && l.len() <= max
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    match rule {
        Label if !label_ok(name, 63) => Some(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character, and be at most 63 characters",
        ),
        Label1035 if !label_ok(name, 63) || !name.as_bytes()[0].is_ascii_lowercase() => Some(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character, and be at most 63 characters",
        ),
        Subdomain if name.len() > 253 || !name.split('.').all(|l| label_ok(l, 253)) => Some(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        ),
        _ => None,
    }
}

/// RFC 7386 JSON merge patch (strategic merge patches are applied the same way).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().expect("object");
    for (k, v) in patch {
        if v.is_null() {
            target.remove(k);
        } else {
            merge_patch(target.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Whether `labels` satisfy a `labelSelector` query (`k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-joined).
pub fn label_selector_matches(selector: &str, labels: Option<&Value>) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                get(k.trim()) != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                get(k.trim()) == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                get(k.trim()).is_none()
            } else {
                get(term).is_some()
            }
        })
}

/// Whether an object satisfies a `fieldSelector` (`path=v`, `path==v`, `path!=v` on dotted paths).
pub fn field_selector_matches(selector: &str, object: &Value) -> bool {
    let get = |path: &str| {
        path.split('.')
            .try_fold(object, |v, k| v.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                get(k) != v
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                get(k) == v
            } else {
                false
            }
        })
}

/// Whether `labels` carry every pair of a map selector (Service selector, `matchLabels`).
pub fn map_selector_matches(selector: &Map<String, Value>, labels: Option<&Value>) -> bool {
    !selector.is_empty()
        && selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// RFC 3339 UTC seconds, as Kubernetes writes timestamps.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn now_stamp() -> String {
    rfc3339(SystemTime::now())
}

/// SplitMix64: deterministic ids and name suffixes without a random source.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The alphabet Kubernetes uses for generated name suffixes and template hashes.
pub fn safe_encode(mut x: u64, len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..len)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Store key: resource plural, namespace (empty when cluster-scoped), name.
pub type Key = (&'static str, String, String);

pub fn key_of(res: &Resource, obj: &Value) -> Key {
    let meta = &obj["metadata"];
    (
        res.plural,
        meta["namespace"].as_str().unwrap_or("").to_string(),
        meta["name"].as_str().unwrap_or("").to_string(),
    )
}

/// Every object, and when the graceful deletions of pods and namespaces began.
#[derive(Default)]
pub struct Store {
    rv: u64,
    seq: u64,
    seed: u64,
    /// Shared, so the controllers' reads copy a pointer, not the object.
    pub objects: BTreeMap<Key, Arc<Value>>,
    /// Pods and namespaces with a deletionTimestamp: when it was set.
    pub deleting: HashMap<Key, Instant>,
    /// When each pod (by uid) was created, so it starts after `pod_start`, and its namespace.
    pub pod_created: HashMap<String, (Instant, String)>,
    /// When the garbage collector first found each object without a live owner.
    pub orphaned: HashMap<Key, Instant>,
    /// Namespaces written since the controllers last looked at them: a tick reads only these
    /// (plus those where time alone changes something), so its cost follows what changed,
    /// not the size of the store.
    pub dirty: BTreeSet<String>,
    /// The next tick reads every namespace (pod behaviours changed).
    pub all_dirty: bool,
    /// `pod-template-hash` by Deployment (uid, generation).
    pub template_hashes: HashMap<(String, i64), String>,
    /// While set, terminating pods keep their deletionTimestamp and stay (as a kubelet whose
    /// containers ignore SIGTERM until their grace period would); released, they go as usual.
    pub hold_terminating_pods: bool,
}

impl Store {
    pub fn new() -> Store {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ u64::from(std::process::id());
        Store {
            rv: 1000,
            seed,
            ..Store::default()
        }
    }

    pub fn resource_version(&self) -> String {
        self.rv.to_string()
    }

    /// A fresh pseudo-random number, distinct for each call.
    pub fn next_random(&mut self) -> u64 {
        self.seq += 1;
        mix(self.seed ^ mix(self.seq))
    }

    fn uid(&mut self) -> String {
        let (a, b) = (self.next_random(), self.next_random());
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        )
    }

    /// Writes an object under its key with the next resourceVersion; returns what was stored.
    pub fn write(&mut self, res: &Resource, mut obj: Value) -> Value {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let key = key_of(res, &obj);
        self.touch(&key);
        self.objects.insert(key, Arc::new(obj.clone()));
        obj
    }

    /// Marks the namespace of `key` (a namespace object: itself) for the next tick.
    fn touch(&mut self, key: &Key) {
        let ns = if key.0 == "namespaces" {
            &key.2
        } else {
            &key.1
        };
        if !self.dirty.contains(ns) {
            self.dirty.insert(ns.clone());
        }
    }

    /// Writes only if something besides the resourceVersion changed, so idle ticks are no writes.
    pub fn write_if_changed(&mut self, res: &Resource, obj: Value) {
        let same = self
            .objects
            .get(&key_of(res, &obj))
            .is_some_and(|old| same_but_version(old, &obj));
        if !same {
            self.write(res, obj);
        }
    }

    pub fn remove(&mut self, key: &Key) {
        if let Some(obj) = self.objects.remove(key) {
            self.rv += 1;
            self.touch(key);
            self.deleting.remove(key);
            if let Some(uid) = obj["metadata"]["uid"].as_str() {
                self.pod_created.remove(uid);
            }
        }
    }

    pub fn lookup(&self, res: &Resource, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(&(res.plural, namespace.to_string(), name.to_string()))
            .map(|o| &**o)
    }

    /// One object, shared (a pointer copy).
    pub fn shared(&self, res: &Resource, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(&(res.plural, namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The objects of one resource (in one namespace): a range of the ordered keys, so the
    /// controllers' per-namespace reads do not scan the whole store.
    pub fn all(&self, plural: &'static str, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let from: Key = (plural, namespace.unwrap_or("").to_string(), String::new());
        self.objects
            .range(from..)
            .take_while(|((p, ns, _), _)| *p == plural && namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| Arc::clone(v))
            .collect()
    }

    pub fn get(&self, res: &Resource, namespace: &str, name: &str) -> Result<Value, ApiError> {
        self.lookup(res, namespace, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(res, name))
    }

    pub fn list(
        &self,
        res: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Value {
        let items: Vec<Value> = self
            .all(res.plural, namespace)
            .into_iter()
            .filter(|o| {
                label_selector
                    .is_none_or(|s| label_selector_matches(s, o["metadata"].get("labels")))
            })
            .filter(|o| field_selector.is_none_or(|s| field_selector_matches(s, o)))
            .map(|o| {
                let mut o = Value::clone(&o);
                // Items of a typed list carry no kind or apiVersion of their own.
                if let Some(m) = o.as_object_mut() {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                o
            })
            .collect();
        json!({
            "kind": format!("{}List", res.kind),
            "apiVersion": res.api_version(),
            "metadata": {"resourceVersion": self.resource_version()},
            "items": items,
        })
    }

    /// Checks that a namespaced create may go into `namespace`.
    fn check_namespace_open(
        &self,
        res: &Resource,
        name: &str,
        namespace: &str,
    ) -> Result<(), ApiError> {
        let namespaces = resource("namespaces");
        match self.lookup(namespaces, "", namespace) {
            None => Err(ApiError::not_found(namespaces, namespace)),
            Some(ns) if ns["metadata"].get("deletionTimestamp").is_some() => {
                Err(ApiError::namespace_terminating(res, name, namespace))
            }
            Some(_) => Ok(()),
        }
    }

    /// POST: validates, defaults and stores a new object. `seed` skips the namespace checks
    /// (objects put directly by a test).
    pub fn create(
        &mut self,
        res: &Resource,
        namespace: Option<&str>,
        body: Value,
        seed: bool,
    ) -> Result<Value, ApiError> {
        let mut obj = body;
        if !obj.is_object() || !obj["metadata"].is_object() && !obj["metadata"].is_null() {
            return Err(ApiError::bad_request("the body is not a Kubernetes object"));
        }
        let mut name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        if name.is_empty() {
            if let Some(prefix) = obj["metadata"]["generateName"].as_str() {
                let suffix = self.next_random();
                name = format!("{prefix}{}", safe_encode(suffix, 5));
            }
        }
        if name.is_empty() {
            return Err(ApiError::invalid_name(
                res,
                "",
                "FieldValueRequired",
                "name or generateName is required",
            ));
        }
        if let Some(why) = name_problem(res.names, &name) {
            return Err(ApiError::invalid_name(res, &name, "FieldValueInvalid", why));
        }
        let namespace = if res.namespaced {
            let body_ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
            let ns = match (namespace, body_ns) {
                (Some(path), Some(body)) if path != body => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                (Some(path), _) => path.to_string(),
                (None, Some(body)) => body,
                (None, None) => return Err(ApiError::bad_request("a namespace is required")),
            };
            if !seed {
                self.check_namespace_open(res, &name, &ns)?;
            }
            Some(ns)
        } else {
            None
        };
        if self
            .lookup(res, namespace.as_deref().unwrap_or(""), &name)
            .is_some()
        {
            return Err(ApiError::already_exists(res, &name));
        }
        obj["kind"] = json!(res.kind);
        obj["apiVersion"] = json!(res.api_version());
        let uid = self.uid();
        let meta = &mut obj["metadata"];
        meta["name"] = json!(name);
        if let Some(ns) = &namespace {
            meta["namespace"] = json!(ns);
        }
        meta["uid"] = json!(uid);
        meta["creationTimestamp"] = json!(now_stamp());
        meta["generation"] = json!(1);
        if let Some(m) = meta.as_object_mut() {
            m.remove("deletionTimestamp");
            m.remove("resourceVersion");
        }
        if res.has_status && !seed {
            obj["status"] = json!({});
        }
        apply_defaults(res, &mut obj, self.next_random());
        if res.plural == "pods" {
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            self.pod_created.insert(uid, (Instant::now(), ns));
        }
        Ok(self.write(res, obj))
    }

    /// PUT: replaces an existing object, honouring a resourceVersion precondition.
    pub fn replace(
        &mut self,
        res: &Resource,
        namespace: &str,
        name: &str,
        body: Value,
    ) -> Result<Value, ApiError> {
        let current = self.get(res, namespace, name)?;
        if !body.is_object() {
            return Err(ApiError::bad_request("the body is not a Kubernetes object"));
        }
        let body_name = body["metadata"]["name"].as_str().unwrap_or("");
        if body_name != name {
            return Err(ApiError::bad_request(&format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = body["metadata"]["resourceVersion"].as_str() {
            if rv
                != current["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
            {
                return Err(ApiError::conflict(
                    res,
                    name,
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
        }
        let mut obj = body;
        obj["kind"] = json!(res.kind);
        obj["apiVersion"] = json!(res.api_version());
        let keep = |obj: &mut Value, field: &str| match current["metadata"].get(field) {
            Some(v) => obj["metadata"][field] = v.clone(),
            None => {
                if let Some(m) = obj["metadata"].as_object_mut() {
                    m.remove(field);
                }
            }
        };
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "namespace",
            "generation",
        ] {
            keep(&mut obj, field);
        }
        if res.has_status {
            match current.get("status") {
                Some(s) => obj["status"] = s.clone(),
                None => {
                    if let Some(m) = obj.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        // The cluster IP is the server's: a replace that omits it keeps it.
        if let Some(ip) = current["spec"].get("clusterIP") {
            if obj["spec"]["clusterIP"].is_null() {
                obj["spec"]["clusterIP"] = ip.clone();
            }
        }
        apply_defaults(res, &mut obj, 0);
        if obj.get("spec") != current.get("spec") {
            let generation = current["metadata"]["generation"].as_i64().unwrap_or(1);
            obj["metadata"]["generation"] = json!(generation + 1);
        }
        Ok(self.write(res, obj))
    }

    /// PATCH (merge or strategic merge): applied to the current object, then stored as a replace.
    pub fn patch(
        &mut self,
        res: &Resource,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        let mut obj = self.get(res, namespace, name)?;
        if !patch.is_object() {
            return Err(ApiError::bad_request("a merge patch must be a JSON object"));
        }
        let precondition = patch["metadata"]["resourceVersion"].as_str().is_some();
        merge_patch(&mut obj, patch);
        if !precondition {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
        }
        self.replace(res, namespace, name, obj)
    }

    /// DELETE: namespaces and pods are deleted gracefully (deletionTimestamp, then gone later);
    /// everything else at once, its dependents collected by the controller.
    pub fn delete(
        &mut self,
        res: &Resource,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let current = self.get(res, namespace, name)?;
        let key: Key = (res.plural, namespace.to_string(), name.to_string());
        let terminating = current["metadata"].get("deletionTimestamp").is_some();
        match res.plural {
            "namespaces" if terminating => Err(ApiError::conflict(
                res,
                name,
                "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.",
            )),
            "pods" if terminating => Ok(current),
            "namespaces" | "pods" => Ok(self.begin_graceful_delete(res, key, current)),
            _ => {
                self.remove(&key);
                let mut details = ApiError::details(res, name);
                details["uid"] = current["metadata"]["uid"].clone();
                Ok(json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }))
            }
        }
    }

    /// Marks a namespace or pod as terminating; the controller removes it later.
    pub fn begin_graceful_delete(&mut self, res: &Resource, key: Key, mut obj: Value) -> Value {
        obj["metadata"]["deletionTimestamp"] = json!(now_stamp());
        if res.plural == "namespaces" {
            obj["status"]["phase"] = json!("Terminating");
        } else {
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        }
        self.deleting.insert(key, Instant::now());
        self.write(res, obj)
    }
}

/// The defaults a real API server fills in on write.
fn apply_defaults(res: &Resource, obj: &mut Value, random: u64) {
    let spec = &mut obj["spec"];
    match res.plural {
        "namespaces" => {
            if obj["status"]["phase"].is_null() {
                obj["status"]["phase"] = json!("Active");
            }
            if obj["spec"]["finalizers"].is_null() {
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
            }
        }
        "deployments" => {
            if spec["replicas"].is_null() {
                spec["replicas"] = json!(1);
            }
            if spec["strategy"]["type"].is_null() {
                spec["strategy"]["type"] = json!("RollingUpdate");
            }
            if spec["strategy"]["type"] == "RollingUpdate"
                && spec["strategy"]["rollingUpdate"].is_null()
            {
                spec["strategy"]["rollingUpdate"] =
                    json!({"maxUnavailable": "25%", "maxSurge": "25%"});
            }
            for (field, value) in [
                ("revisionHistoryLimit", 10),
                ("progressDeadlineSeconds", 600),
            ] {
                if spec[field].is_null() {
                    spec[field] = json!(value);
                }
            }
        }
        "services" => {
            if spec["type"].is_null() {
                spec["type"] = json!("ClusterIP");
            }
            if spec["clusterIP"].is_null() && random != 0 {
                spec["clusterIP"] = json!(format!(
                    "10.96.{}.{}",
                    (random >> 8) % 256,
                    random % 254 + 1
                ));
            }
        }
        "pods" if obj["status"]["phase"].is_null() => {
            obj["status"]["phase"] = json!("Pending");
        }
        _ => {}
    }
}

/// Whether two versions of an object differ only in their resourceVersion.
fn same_but_version(old: &Value, new: &Value) -> bool {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return old == new;
    };
    let fields = |m: &Map<String, Value>| m.keys().filter(|k| *k != "resourceVersion").count();
    let metadata_same = match (
        old.get("metadata").and_then(Value::as_object),
        new.get("metadata").and_then(Value::as_object),
    ) {
        (Some(a), Some(b)) => {
            fields(a) == fields(b)
                && a.iter()
                    .all(|(k, v)| k == "resourceVersion" || b.get(k) == Some(v))
        }
        (a, b) => a.is_none() && b.is_none(),
    };
    old.len() == new.len()
        && old
            .iter()
            .all(|(k, v)| k == "metadata" || new.get(k) == Some(v))
        && metadata_same
}
