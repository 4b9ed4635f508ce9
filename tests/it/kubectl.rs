//! The `kubectl` the Kubernetes walk-throughs run in the tests: a bash function that does, with
//! curl against the TLS API server fake, exactly the commands README.md and docs/kubernetes.md
//! type, and refuses anything else in one line (`kubectl stand-in: not supported: …`, exit 1).
//! CI's machines have neither kubectl nor kind, and the real kubectl is never reached: a
//! function shadows any `kubectl` on PATH.
//!
//! What it does, as kubectl does it:
//! - `apply -f deploy/kubernetes/FILE.yaml` and `apply -k deploy/kubernetes`: each object
//!   created, or merge-patched when it exists (`KIND.GROUP/NAME created|configured`). The YAML is
//!   rendered to JSON here, in Rust (the shell has no YAML parser), and `-k` as kustomize
//!   renders `kustomization.yaml`: its namespace on namespaced objects, the `configMapGenerator`
//!   ConfigMap with a content-hash suffix (and the Deployment's reference to it), the `images`
//!   override. A file outside `deploy/kubernetes` is refused.
//! - `create namespace NAME`; `-n NS create secret generic NAME --from-literal=K=V…`;
//!   `-n NS create rolebinding NAME --clusterrole=ROLE --group=GROUP`: 409 AlreadyExists fails
//!   as kubectl's `create` does.
//! - `wait --for=create TYPE/NAME --timeout=Ns`: polls until it exists, else exit 1 naming it.
//! - `-n NS get TYPE[,TYPE…]` as a table (`deployment.apps/NAME` rows with several types) and
//!   `-n NS get TYPE NAME -o yaml`, printed as JSON, which is YAML.

use crate::kube_fake::KubeFake;
use serde_json::{json, Value};
use sha2::Digest;
use std::path::Path;

/// The API collection path of an object (`/apis/GROUP/VERSION[/namespaces/NS]/PLURAL`).
fn collection(object: &Value) -> String {
    let api = object["apiVersion"].as_str().unwrap_or("v1");
    let kind = object["kind"].as_str().unwrap_or("");
    let plural = match kind {
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "RoleBinding" => "rolebindings",
        "Deployment" => "deployments",
        "PodDisruptionBudget" => "poddisruptionbudgets",
        "ConfigMap" => "configmaps",
        "Secret" => "secrets",
        other => panic!("the kubectl stand-in does not apply {other}"),
    };
    let root = if api.contains('/') {
        format!("/apis/{api}")
    } else {
        format!("/api/{api}")
    };
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{root}/namespaces/{ns}/{plural}"),
        None => format!("{root}/{plural}"),
    }
}

/// Every document of a YAML file, as JSON objects.
fn yaml_objects(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            let v: Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            v
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// `kustomize build deploy/kubernetes` for the features its kustomization uses.
fn kustomize(dir: &Path) -> Vec<Value> {
    let k = yaml_objects(&dir.join("kustomization.yaml")).remove(0);
    let namespace = k["namespace"].as_str();
    let mut objects: Vec<Value> = k["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| yaml_objects(&dir.join(r.as_str().unwrap())))
        .collect();
    let mut renamed = Vec::new();
    for generator in k["configMapGenerator"].as_array().into_iter().flatten() {
        let name = generator["name"].as_str().unwrap();
        let mut data = serde_json::Map::new();
        for file in generator["files"].as_array().into_iter().flatten() {
            let file = file.as_str().unwrap();
            data.insert(
                file.to_string(),
                json!(std::fs::read_to_string(dir.join(file)).unwrap()),
            );
        }
        // A suffix as kustomize makes one (ten characters of a SHA-256 of the content, some
        // letters and digits swapped so that it never spells a word), not byte for byte its.
        let digest = sha2::Sha256::digest(
            json!({"data": data, "kind": "ConfigMap", "name": name}).to_string(),
        );
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let suffix: String = hex[..10]
            .chars()
            .map(|c| match c {
                '0' => 'g',
                '1' => 'h',
                '3' => 'k',
                'a' => 'm',
                'e' => 't',
                c => c,
            })
            .collect();
        let full = format!("{name}-{suffix}");
        objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": full}, "data": data}));
        renamed.push((name.to_string(), full));
    }
    for object in &mut objects {
        let cluster_scoped = matches!(
            object["kind"].as_str(),
            Some("Namespace" | "ClusterRole" | "ClusterRoleBinding")
        );
        if let (Some(ns), false) = (namespace, cluster_scoped) {
            object["metadata"]["namespace"] = json!(ns);
        }
        let spec = &mut object["spec"]["template"]["spec"];
        for volume in spec["volumes"].as_array_mut().into_iter().flatten() {
            for (from, to) in &renamed {
                if volume["configMap"]["name"] == json!(from) {
                    volume["configMap"]["name"] = json!(to);
                }
            }
        }
        for container in spec["containers"].as_array_mut().into_iter().flatten() {
            for image in k["images"].as_array().into_iter().flatten() {
                let name = image["name"].as_str().unwrap();
                let current = container["image"].as_str().unwrap_or("").to_string();
                if current == name || current.starts_with(&format!("{name}:")) {
                    container["image"] = json!(format!(
                        "{}:{}",
                        image["newName"].as_str().unwrap_or(name),
                        image["newTag"].as_str().unwrap()
                    ));
                }
            }
        }
    }
    objects
}

/// Writes what the stand-in needs under `dir` (the fake's CA, each manifest of
/// `deploy/kubernetes` rendered as `[{path, object}]` under `.kubectl/`) and returns the bash
/// that defines `kubectl`. `dir` is the shell's working directory.
pub fn stand_in(fake: &KubeFake, dir: &Path) -> String {
    let state = dir.join(".kubectl");
    let rendered = state.join("deploy/kubernetes");
    std::fs::create_dir_all(&rendered).unwrap();
    std::fs::write(state.join("ca.pem"), fake.ca_pem()).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let write = |name: &str, objects: Vec<Value>| {
        let entries: Vec<Value> = objects
            .into_iter()
            .map(|o| {
                // As kubectl names what it applied: `clusterrole.rbac.authorization.k8s.io/NAME`.
                let api = o["apiVersion"].as_str().unwrap_or("v1");
                let kind = o["kind"].as_str().unwrap_or("").to_lowercase();
                let name = o["metadata"]["name"].as_str().unwrap_or("");
                let named = match api.split_once('/') {
                    Some((group, _)) => format!("{kind}.{group}/{name}"),
                    None => format!("{kind}/{name}"),
                };
                json!({"path": collection(&o), "name": named, "object": o})
            })
            .collect();
        std::fs::write(rendered.join(name), Value::Array(entries).to_string()).unwrap();
    };
    for entry in std::fs::read_dir(&source).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".yaml") && name != "kustomization.yaml" {
            let objects = yaml_objects(&path);
            // The tenant RoleBinding template names a placeholder namespace: it is edited,
            // never applied as it is.
            if objects.iter().all(|o| o["kind"] != "RoleBinding") {
                write(&format!("{name}.json"), objects);
            }
        }
    }
    write("kustomization.json", kustomize(&source));
    let state = state.display();
    format!(
        r#"kubectl() {{
    local - ns=
    set +x    # the caller's trace shows the command; `local -` restores it on return
    if [ "${{1-}}" = -n ]; then ns=$2; shift 2; fi
    _kubectl_refuse() {{ echo "kubectl stand-in: not supported: $*" >&2; return 1; }}
    # curl METHOD PATH [BODY [CONTENT-TYPE]]: the answer in $_kubectl_body, its status in
    # $_kubectl_code.
    _kubectl_curl() {{
        _kubectl_body=$(curl -sS --cacert {state}/ca.pem -H "Authorization: Bearer {token}" \
            -H "Content-Type: ${{4:-application/json}}" -X "$1" "{url}$2" ${{3:+-d "$3"}} \
            -w '\n%{{http_code}}')
        _kubectl_code=${{_kubectl_body##*$'\n'}}
        _kubectl_body=${{_kubectl_body%$'\n'*}}
    }}
    _kubectl_fail() {{
        echo "Error from server ($(jq -r .reason <<< "$_kubectl_body")): $(jq -r .message <<< "$_kubectl_body")" >&2
        return 1
    }}
    _kubectl_create() {{   # PATH OBJECT TYPE/NAME
        _kubectl_curl POST "$1" "$2"
        [ "$_kubectl_code" = 201 ] || _kubectl_fail || return 1
        echo "$3 created"
    }}
    case "${{1-}} ${{2-}}" in
    "apply -f"|"apply -k")
        local rendered={state}/${{3-}}.json
        [ "$2" = -k ] && rendered={state}/${{3-}}/kustomization.json
        [ $# -eq 3 ] && [ -f "$rendered" ] \
            || {{ _kubectl_refuse "$@" "(only deploy/kubernetes manifests)"; return 1; }}
        local i path object name
        for i in $(seq 0 $(( $(jq length "$rendered") - 1 ))); do
            path=$(jq -r ".[$i].path" "$rendered")
            object=$(jq -c ".[$i].object" "$rendered")
            name=$(jq -r ".[$i].name" "$rendered")
            _kubectl_curl POST "$path" "$object"
            if [ "$_kubectl_code" = 201 ]; then
                echo "$name created"
            elif [ "$_kubectl_code" = 409 ]; then
                _kubectl_curl PATCH "$path/$(jq -r .metadata.name <<< "$object")" \
                    "$object" application/merge-patch+json
                [ "$_kubectl_code" = 200 ] || _kubectl_fail || return 1
                echo "$name configured"
            else
                _kubectl_fail || return 1
            fi
        done
        ;;
    "create namespace")
        [ $# -eq 3 ] && [ -z "$ns" ] || {{ _kubectl_refuse "$@"; return 1; }}
        _kubectl_create /api/v1/namespaces \
            "{{\"apiVersion\": \"v1\", \"kind\": \"Namespace\", \"metadata\": {{\"name\": \"$3\"}}}}" \
            "namespace/$3"
        ;;
    "create secret")
        [ "${{3-}}" = generic ] && [ -n "$ns" ] && [ $# -ge 5 ] || {{ _kubectl_refuse "$@"; return 1; }}
        local name=$4 data='{{}}' literal
        shift 4
        for literal in "$@"; do
            [ "${{literal%%=*}}" = --from-literal ] || {{ _kubectl_refuse "$literal"; return 1; }}
            literal=${{literal#--from-literal=}}
            data=$(jq -c --arg k "${{literal%%=*}}" --arg v "$(printf %s "${{literal#*=}}" | base64 -w0)" \
                '. + {{($k): $v}}' <<< "$data")
        done
        _kubectl_create "/api/v1/namespaces/$ns/secrets" \
            "{{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {{\"name\": \"$name\"}}, \"type\": \"Opaque\", \"data\": $data}}" \
            "secret/$name"
        ;;
    "create rolebinding")
        [ $# -eq 5 ] && [ -n "$ns" ] && [ "${{4%%=*}}" = --clusterrole ] && [ "${{5%%=*}}" = --group ] \
            || {{ _kubectl_refuse "$@"; return 1; }}
        _kubectl_create "/apis/rbac.authorization.k8s.io/v1/namespaces/$ns/rolebindings" \
            "{{\"apiVersion\": \"rbac.authorization.k8s.io/v1\", \"kind\": \"RoleBinding\",
              \"metadata\": {{\"name\": \"$3\"}},
              \"roleRef\": {{\"apiGroup\": \"rbac.authorization.k8s.io\", \"kind\": \"ClusterRole\", \"name\": \"${{4#*=}}\"}},
              \"subjects\": [{{\"apiGroup\": \"rbac.authorization.k8s.io\", \"kind\": \"Group\", \"name\": \"${{5#*=}}\"}}]}}" \
            "rolebinding.rbac.authorization.k8s.io/$3"
        ;;
    *)
        local third=${{3-}} fourth=${{4-}}
        case "${{1-}} ${{2-}} ${{third%%/*}} ${{fourth%%=*}}" in
        "wait --for=create namespace --timeout")
            [ $# -eq 4 ] && [ -z "$ns" ] || {{ _kubectl_refuse "$@"; return 1; }}
            local timeout=${{4#--timeout=}} deadline
            deadline=$(( $(date +%s) + ${{timeout%s}} ))
            until _kubectl_curl GET "/api/v1/namespaces/${{3#*/}}"; [ "$_kubectl_code" = 200 ]; do
                if [ "$(date +%s)" -ge "$deadline" ]; then
                    echo "error: timed out waiting for the condition on namespaces/${{3#*/}}" >&2
                    return 1
                fi
                sleep 0.2
            done
            echo "$3 condition met"
            ;;
        "get "*)
            [ -n "$ns" ] || {{ _kubectl_refuse "$@"; return 1; }}
            if [ $# -eq 5 ] && [ "$4 $5" = "-o yaml" ] && [ "$2" = networkpolicy ]; then
                _kubectl_curl GET "/apis/networking.k8s.io/v1/namespaces/$ns/networkpolicies/$3"
                [ "$_kubectl_code" = 200 ] || _kubectl_fail || return 1
                jq . <<< "$_kubectl_body"    # JSON is YAML
                return
            fi
            [ $# -eq 2 ] || {{ _kubectl_refuse "$@"; return 1; }}
            local types=$2 type path prefix= several=
            [ "${{types/,/}}" != "$types" ] && several=1
            for type in ${{types//,/ }}; do
                case "$type" in
                deployments) path=/apis/apps/v1/namespaces/$ns/deployments; prefix=deployment.apps/ ;;
                pods) path=/api/v1/namespaces/$ns/pods; prefix=pod/ ;;
                services) path=/api/v1/namespaces/$ns/services; prefix=service/ ;;
                *) _kubectl_refuse get "$type"; return 1 ;;
                esac
                [ -n "$several" ] || prefix=
                _kubectl_curl GET "$path"
                [ "$_kubectl_code" = 200 ] || _kubectl_fail || return 1
                case "$type" in
                deployments) jq -r --arg p "$prefix" '["NAME", "READY", "UP-TO-DATE", "AVAILABLE"],
                    (.items[] | [$p + .metadata.name,
                                 "\(.status.readyReplicas // 0)/\(.spec.replicas // 1)",
                                 "\(.status.updatedReplicas // 0)", "\(.status.availableReplicas // 0)"])
                    | @tsv' <<< "$_kubectl_body" ;;
                pods) jq -r --arg p "$prefix" '["NAME", "READY", "STATUS"],
                    (.items[] | [$p + .metadata.name,
                                 "\([.status.containerStatuses[]? | select(.ready)] | length)/\(.spec.containers | length)",
                                 (if .metadata.deletionTimestamp then "Terminating" else .status.phase end)])
                    | @tsv' <<< "$_kubectl_body" ;;
                services) jq -r --arg p "$prefix" '["NAME", "TYPE", "PORT(S)"],
                    (.items[] | [$p + .metadata.name, (.spec.type // "ClusterIP"),
                                 ([.spec.ports[]? | "\(.port)/\(.protocol // "TCP")"] | join(","))])
                    | @tsv' <<< "$_kubectl_body" ;;
                esac
                [ -z "$several" ] || echo
            done
            ;;
        *) _kubectl_refuse "$@"; return 1 ;;
        esac
        ;;
    esac
}}
"#,
        token = fake.token(),
        url = fake.url(),
    )
}
