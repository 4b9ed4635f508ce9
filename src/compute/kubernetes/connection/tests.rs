//! Unit tests of discovery: in-cluster, kubeconfig variants and refusals.

use super::*;

/// A throwaway self-signed certificate and its key, for parsing only.
const CERT: &str = include_str!("../../../../tests/fixtures/kubernetes/ca.crt");
const KEY: &str = include_str!("../../../../tests/fixtures/kubernetes/ca.key");

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "occ-kube-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A kubeconfig with contexts `prod` (current) and `dev` around the given cluster and user
/// bodies (indented YAML mappings).
fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: prod\nclusters:\n- name: main\n  cluster:\n{cluster}\nusers:\n- name: ops\n  user:\n{user}\ncontexts:\n- name: prod\n  context:\n    cluster: main\n    user: ops\n- name: dev\n  context:\n    cluster: main\n    user: dev\n"
    )
}

fn ca_data_cluster() -> String {
    format!(
        "    server: https://k8s.example:6443/\n    certificate-authority-data: {}",
        b64(CERT)
    )
}

fn error(scratch: &Scratch, text: &str, context: Option<&str>) -> ConnectionError {
    let path = scratch.write("config", text);
    from_kubeconfig(&path, context).unwrap_err()
}

#[test]
fn in_cluster_uses_the_service_account() {
    let dir = Scratch::new("in-cluster");
    dir.write("token", "tok\n");
    dir.write("ca.crt", CERT);
    let conn = discover_in_cluster(&dir.0, "10.0.0.1", "443").unwrap();
    assert_eq!(conn.server, "https://10.0.0.1:443");
    assert_eq!(conn.source, "in-cluster");
    assert_eq!(conn.ca_certs.len(), 1);
    assert!(matches!(&conn.auth, Auth::TokenFile(p) if p == &dir.0.join("token")));
    let v6 = discover_in_cluster(&dir.0, "fd00::1", "443").unwrap();
    assert_eq!(v6.server, "https://[fd00::1]:443");
}

#[test]
fn in_cluster_without_a_token_is_an_error() {
    let dir = Scratch::new("in-cluster-empty");
    dir.write("ca.crt", CERT);
    let err = discover_in_cluster(&dir.0, "10.0.0.1", "443").unwrap_err();
    assert_eq!(err.kind(), ConnectionErrorKind::Io);
    assert!(err.to_string().starts_with("in-cluster: cannot read"));
    dir.write("token", " \n");
    let err = discover_in_cluster(&dir.0, "10.0.0.1", "443").unwrap_err();
    assert_eq!(err.kind(), ConnectionErrorKind::Credential);
}

#[test]
fn discover_prefers_in_cluster_then_kubeconfig() {
    let dir = Scratch::new("discover");
    let path = dir.write(
        "kube/config",
        &kubeconfig(&ca_data_cluster(), "    token: abc"),
    );
    let env = |vars: Vec<(&'static str, String)>| {
        move |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        }
    };
    // KUBECONFIG: the first non-empty path of the list.
    let list = format!(":{}:/nonexistent", path.display());
    let conn = discover(env(vec![("KUBECONFIG", list)]), None).unwrap();
    assert_eq!(conn.server, "https://k8s.example:6443");
    assert_eq!(
        conn.source,
        format!("kubeconfig {} context prod", path.display())
    );
    // HOME when KUBECONFIG is unset.
    let conn = discover(env(vec![("HOME", dir.0.display().to_string())]), None);
    assert!(conn.is_err(), "HOME/.kube/config does not exist here");
    std::fs::create_dir_all(dir.0.join(".kube")).unwrap();
    std::fs::copy(&path, dir.0.join(".kube/config")).unwrap();
    let conn = discover(env(vec![("HOME", dir.0.display().to_string())]), None).unwrap();
    assert!(matches!(conn.auth, Auth::Token(ref t) if t == "abc"));
    // In-cluster variables win, unless a context is asked for.
    let in_cluster = env(vec![
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1".to_string()),
        ("KUBERNETES_SERVICE_PORT", "443".to_string()),
        ("KUBECONFIG", path.display().to_string()),
    ]);
    let err = discover(&in_cluster, None).unwrap_err();
    assert!(err.to_string().starts_with("in-cluster:"), "{err}");
    assert!(discover(&in_cluster, Some("prod")).is_ok());
    let err = discover(env(vec![]), None).unwrap_err();
    assert_eq!(err.kind(), ConnectionErrorKind::NotConfigured);
}

#[test]
fn data_forms_are_decoded() {
    let dir = Scratch::new("data");
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}",
        b64(CERT),
        b64(KEY)
    );
    let path = dir.write("config", &kubeconfig(&ca_data_cluster(), &user));
    let conn = from_kubeconfig(&path, None).unwrap();
    assert_eq!(conn.ca_certs.len(), 1);
    match conn.auth {
        Auth::ClientCert { chain, key } => {
            assert_eq!(chain.len(), 1);
            assert_eq!(format!("{:?}", key.kind()), "Pkcs8");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn relative_paths_start_at_the_kubeconfig_directory() {
    let dir = Scratch::new("relative");
    dir.write("conf/pki/ca.crt", CERT);
    dir.write("conf/pki/client.crt", CERT);
    dir.write("conf/pki/client.key", KEY);
    dir.write("conf/token", "from-file\n");
    let cluster = "    server: https://k8s.example:6443\n    certificate-authority: pki/ca.crt";
    let user = "    client-certificate: pki/client.crt\n    client-key: pki/client.key";
    let path = dir.write("conf/config", &kubeconfig(cluster, user));
    let conn = from_kubeconfig(&path, None).unwrap();
    assert!(matches!(conn.auth, Auth::ClientCert { .. }));
    let user = "    tokenFile: token";
    let path = dir.write("conf/config", &kubeconfig(cluster, user));
    let conn = from_kubeconfig(&path, None).unwrap();
    assert!(matches!(&conn.auth, Auth::TokenFile(p) if p == &dir.0.join("conf/token")));
    // Absolute paths are kept.
    let absolute = format!(
        "    server: https://k8s.example:6443\n    certificate-authority: {}",
        dir.0.join("conf/pki/ca.crt").display()
    );
    let path = dir.write("other/config", &kubeconfig(&absolute, "    token: t"));
    assert!(from_kubeconfig(&path, None).is_ok());
}

#[test]
fn the_context_is_chosen_by_name() {
    let dir = Scratch::new("context");
    let text = kubeconfig(&ca_data_cluster(), "    token: ops-token").replace(
        "contexts:",
        "- name: dev\n  user:\n    token: dev-token\ncontexts:",
    );
    let path = dir.write("config", &text);
    let prod = from_kubeconfig(&path, None).unwrap();
    assert!(matches!(prod.auth, Auth::Token(ref t) if t == "ops-token"));
    let dev = from_kubeconfig(&path, Some("dev")).unwrap();
    assert!(matches!(dev.auth, Auth::Token(ref t) if t == "dev-token"));
    assert!(dev.source.ends_with("context dev"));
    let err = from_kubeconfig(&path, Some("staging")).unwrap_err();
    assert_eq!(err.kind(), ConnectionErrorKind::Missing);
    assert_eq!(
        err.to_string(),
        format!(
            "kubeconfig {}: context \"staging\" not found",
            path.display()
        )
    );
}

#[test]
fn unsupported_features_are_refused_in_one_line() {
    let dir = Scratch::new("unsupported");
    let p = dir.0.join("config");
    let cases = [
        (
            kubeconfig(&ca_data_cluster(), "    exec:\n      command: aws\n      args: [eks, get-token]"),
            Some("dev"),
            "user \"dev\" not found",
        ),
        (
            kubeconfig(&ca_data_cluster(), "    exec:\n      apiVersion: client.authentication.k8s.io/v1alpha1\n      command: aws\n      args: [eks, get-token]"),
            None,
            "exec plugin \"aws\" asks for apiVersion \"client.authentication.k8s.io/v1alpha1\"; occ-worker supports client.authentication.k8s.io/v1 and client.authentication.k8s.io/v1beta1",
        ),
        (
            kubeconfig(&ca_data_cluster(), "    auth-provider:\n      name: gcp"),
            None,
            "user \"ops\" uses an auth-provider, which occ-worker does not support; use a token or client certificate",
        ),
        (
            kubeconfig(&ca_data_cluster(), "    username: admin\n    password: hunter2"),
            None,
            "user \"ops\" uses a username and password, which occ-worker does not support; use a token or client certificate",
        ),
        (
            kubeconfig(&ca_data_cluster(), "    token: t\n    as-groups: [system:masters]"),
            None,
            "user \"ops\" uses impersonation (as), which occ-worker does not support; use a token or client certificate",
        ),
        (
            kubeconfig(
                &format!("{}\n    insecure-skip-tls-verify: true", ca_data_cluster()),
                "    token: t",
            ),
            None,
            "cluster \"main\" sets insecure-skip-tls-verify, which occ-worker refuses; configure its certificate-authority",
        ),
        (
            kubeconfig("    server: http://k8s.example:8080", "    token: t"),
            None,
            "cluster \"main\" server is not an https:// URL; occ-worker always uses TLS",
        ),
        (
            kubeconfig("    server: https://k8s.example:6443", "    token: t"),
            None,
            "cluster \"main\" has no certificate-authority; occ-worker verifies TLS only against a configured CA",
        ),
        (
            kubeconfig(
                "    server: https://k8s.example:6443\n    certificate-authority-data: '!!'",
                "    token: t",
            ),
            None,
            "cluster \"main\" certificate-authority-data is not valid base64",
        ),
        (
            kubeconfig(&ca_data_cluster(), "    client-certificate-data: AAAA"),
            None,
            "user \"ops\" has a client certificate but no client-key",
        ),
        (
            kubeconfig(&ca_data_cluster(), "    token: t").replace("current-context: prod\n", ""),
            None,
            "has no current-context; set OCC_KUBERNETES_CONTEXT",
        ),
        (
            kubeconfig(&ca_data_cluster(), "    token: t").replace("cluster: main", "cluster: gone"),
            None,
            "cluster \"gone\" not found",
        ),
    ];
    for (text, context, expected) in cases {
        let err = error(&dir, &text, context);
        assert_eq!(
            err.to_string(),
            format!("kubeconfig {}: {expected}", p.display())
        );
        assert!(!err.to_string().contains('\n'));
        assert!(!err.to_string().contains("hunter2"));
    }
}

#[test]
fn malformed_yaml_is_one_line() {
    let dir = Scratch::new("malformed");
    let err = error(&dir, "clusters: [\n  - {\n", None);
    assert_eq!(err.kind(), ConnectionErrorKind::Malformed);
    assert!(!err.to_string().contains('\n'));
    let err = from_kubeconfig(&dir.0.join("absent"), None).unwrap_err();
    assert_eq!(err.kind(), ConnectionErrorKind::Io);
    assert!(err.to_string().starts_with(&format!(
        "kubeconfig {0}: cannot read {0} (",
        dir.0.join("absent").display()
    )));
}

#[test]
fn debug_output_hides_secrets() {
    let auth = Auth::Token("secret-token".to_string());
    assert!(!format!("{auth:?}").contains("secret-token"));
}

#[test]
fn discovery_reads_only_the_variables_it_lists() {
    let read = std::cell::RefCell::new(Vec::new());
    let Err(e) = discover(
        |name| {
            read.borrow_mut().push(name.to_string());
            None
        },
        None,
    ) else {
        panic!("a connection with nothing configured");
    };
    assert_eq!(e.kind(), ConnectionErrorKind::NotConfigured);
    let listed: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
    assert_eq!(read.into_inner(), listed);
}
