use super::*;
use std::io::Write;

/// A CA bundle file with one self-signed certificate, removed on drop.
struct CaFile(PathBuf);

impl CaFile {
    fn new() -> CaFile {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["hook.test".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("self-sign");
        let path = std::env::temp_dir().join(format!(
            "occ-installation-ca-{}-{:?}.pem",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(cert.pem().as_bytes()))
            .expect("write CA file");
        CaFile(path)
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for CaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn hook(ca: &CaFile, driver: &str, extra: &str) -> String {
    format!(
        r#"{{"driver":"{driver}","url":"https://hooks.example:8443/{driver}","caFile":"{}","phases":["beforeWorkloadStart"]{extra}}}"#,
        ca.path()
    )
}

fn problems(text: &str, compute: DriverKind) -> Vec<String> {
    Installation::parse(text, compute)
        .expect_err("refused")
        .problems()
        .to_vec()
}

const SANDBOX: &str =
    r#""sandbox":{"id":"sb","implementation":"kubernetes-sandbox","facets":["read-only-root"]}"#;

#[test]
fn an_empty_file_selects_nothing() {
    assert_eq!(
        Installation::parse("{}", DriverKind::Docker).unwrap(),
        Installation::default()
    );
}

#[test]
fn h1_hooks_are_kept_in_h2_order_with_their_defaults() {
    let ca = CaFile::new();
    let text = format!(
        r#"{{"lifecycleHooks":[{},{},{}],{SANDBOX}}}"#,
        hook(&ca, "iam", r#","timeoutSeconds":30"#),
        hook(&ca, "configuration", ""),
        hook(&ca, "sandbox", r#","timeoutSeconds":1"#),
    );
    let installation = Installation::parse(&text, DriverKind::Kubernetes).unwrap();
    let order: Vec<_> = installation
        .lifecycle_hooks
        .iter()
        .map(|h| (h.driver, h.timeout.as_secs()))
        .collect();
    assert_eq!(
        order,
        [
            (HookDriver::Configuration, 10),
            (HookDriver::Sandbox, 1),
            (HookDriver::Iam, 30)
        ]
    );
    assert!(!installation.lifecycle_hooks[0].ca_pem.is_empty());
    assert_eq!(
        installation.hooks_for(Phase::BeforeWorkloadStart).count(),
        3
    );
    assert_eq!(installation.hooks_for(Phase::BeforeWorkloadStop).count(), 0);
}

#[test]
fn h1_each_violation_is_one_line_naming_the_entry() {
    let ca = CaFile::new();
    let cases: Vec<(String, &str)> = vec![
        (
            format!(r#"{{"lifecycleHooks":[{},{}]}}"#, hook(&ca, "iam", ""), hook(&ca, "iam", "")),
            "lifecycleHooks[1]: a second entry for driver iam (a driver has one hook set)",
        ),
        (
            format!(r#"{{"lifecycleHooks":[{}]}}"#, hook(&ca, "iam", "").replace(r#"["beforeWorkloadStart"]"#, "[]")),
            "lifecycleHooks[0].phases must name at least one phase",
        ),
        (
            format!(r#"{{"lifecycleHooks":[{}]}}"#, hook(&ca, "iam", "").replace(r#"["beforeWorkloadStart"]"#, r#"["beforeWorkloadStop","beforeWorkloadStop"]"#)),
            "lifecycleHooks[0].phases names beforeWorkloadStop twice",
        ),
        (
            format!(r#"{{"lifecycleHooks":[{}]}}"#, hook(&ca, "iam", "").replace("https://", "http://")),
            r#"lifecycleHooks[0].url must be an https:// URL with a host, got "http://hooks.example:8443/iam""#,
        ),
        (
            format!(r#"{{"lifecycleHooks":[{}]}}"#, hook(&ca, "iam", r#","timeoutSeconds":31"#)),
            "lifecycleHooks[0].timeoutSeconds must be 1-30, got 31",
        ),
        (
            format!(r#"{{"lifecycleHooks":[{}]}}"#, hook(&ca, "iam", r#","timeoutSeconds":0"#)),
            "lifecycleHooks[0].timeoutSeconds must be 1-30, got 0",
        ),
        (
            format!(r#"{{"lifecycleHooks":[{}]}}"#, hook(&ca, "sandbox", "")),
            "lifecycleHooks[0]: driver sandbox needs a sandbox selected (the `sandbox` key)",
        ),
        (
            format!(r#"{{"lifecycleHooks":[{}]}}"#, hook(&ca, "iam", "").replace(&ca.path(), "/nonexistent/ca.pem")),
            "lifecycleHooks[0].caFile /nonexistent/ca.pem cannot be read (No such file or directory (os error 2))",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(
            problems(&text, DriverKind::Kubernetes),
            [expected],
            "{text}"
        );
    }
    // Shape errors name the key path.
    let shape = problems(
        &format!(
            r#"{{"lifecycleHooks":[{}]}}"#,
            hook(&ca, "iam", "").replace("beforeWorkloadStart", "beforeLunch")
        ),
        DriverKind::Kubernetes,
    );
    assert!(
        shape[0].starts_with("lifecycleHooks[0].phases[0]: unknown variant `beforeLunch`"),
        "{shape:?}"
    );
}

#[test]
fn an_unknown_key_is_named() {
    let message = problems(r#"{"lifecycleHook":[]}"#, DriverKind::Docker);
    assert_eq!(message.len(), 1);
    assert!(
        message[0].starts_with("lifecycleHook: unknown field `lifecycleHook`, expected one of"),
        "{message:?}"
    );
    let nested = problems(
        r#"{"sandbox":{"id":"sb","implementation":"kubernetes-sandbox","facets":["read-only-root"],"fast":true}}"#,
        DriverKind::Kubernetes,
    );
    assert!(
        nested[0].starts_with("sandbox.fast: unknown field `fast`"),
        "{nested:?}"
    );
}

#[test]
fn s1_the_sandbox_is_checked_with_one_line_per_problem() {
    assert_eq!(
        problems(&format!("{{{SANDBOX}}}"), DriverKind::Docker),
        ["sandbox needs the kubernetes Compute Driver (OCC_COMPUTE_DRIVER)"]
    );
    assert_eq!(
        problems(
            r#"{"sandbox":{"id":" ","implementation":"gvisor","facets":["read-only-root","read-only-root","fast"]}}"#,
            DriverKind::Kubernetes
        ),
        [
            "sandbox.id must not be blank",
            r#"sandbox.implementation must be kubernetes-sandbox, got "gvisor""#,
            "sandbox.facets names read-only-root twice",
            r#"sandbox.facets[2] "fast" is not a facet; known: pod-security-restricted, default-deny-egress, no-service-account-token, read-only-root, runtime-class"#,
        ]
    );
    assert_eq!(
        problems(
            r#"{"sandbox":{"id":"sb","implementation":"kubernetes-sandbox","facets":["runtime-class"]}}"#,
            DriverKind::Kubernetes
        ),
        ["sandbox.runtimeClassName is required when runtime-class is a facet"]
    );
    assert_eq!(
        problems(
            r#"{"sandbox":{"id":"sb","implementation":"kubernetes-sandbox","facets":["read-only-root"],"runtimeClassName":"gvisor"}}"#,
            DriverKind::Kubernetes
        ),
        ["sandbox.runtimeClassName is set but runtime-class is not a facet; list the facet or leave the key out"]
    );
    let ok = Installation::parse(
        r#"{"sandbox":{"id":"sb","implementation":"kubernetes-sandbox","facets":["runtime-class","read-only-root"],"runtimeClassName":"gvisor"}}"#,
        DriverKind::Kubernetes,
    )
    .unwrap();
    assert_eq!(
        ok.sandbox,
        Some(Sandbox {
            id: "sb".into(),
            facets: vec![Facet::RuntimeClass, Facet::ReadOnlyRoot],
            runtime_class_name: Some("gvisor".into()),
        })
    );
}

#[test]
fn s1_the_ceiling_has_the_egress_shape() {
    let ok = Installation::parse(
        r#"{"sandboxNetworkPolicyCeiling":[{"cidr":"10.0.0.0/8","ports":[443,8443]}]}"#,
        DriverKind::Kubernetes,
    )
    .unwrap();
    assert_eq!(
        ok.sandbox_network_policy_ceiling,
        [EgressRule {
            cidr: "10.0.0.0/8".into(),
            ports: vec![443, 8443]
        }]
    );
    assert_eq!(
        problems(
            r#"{"sandboxNetworkPolicyCeiling":[{"cidr":"10.0.0.1/8","ports":[]},{"cidr":"10.0.0.0/8","ports":[0,65536]}]}"#,
            DriverKind::Kubernetes
        ),
        [
            "sandboxNetworkPolicyCeiling[0].cidr must be an IPv4 or IPv6 network such as 10.0.0.0/8, its host bits zero",
            "sandboxNetworkPolicyCeiling[0].ports must name at least one port",
            "sandboxNetworkPolicyCeiling[1].ports must be TCP ports 1-65535",
        ]
    );
}

#[test]
fn credential_drivers_need_their_prerequisites() {
    // SPEC §13: a gateway needs Kubernetes and a sandbox; no proxy is built in.
    assert_eq!(
        problems(
            r#"{"credentialGateway":{"id":"gw","implementation":"kubernetes-secret-gateway"}}"#,
            DriverKind::Kubernetes
        ),
        ["credentialGateway needs a sandbox selected"]
    );
    assert_eq!(
        problems(
            r#"{"credentialGateway":{"id":"gw","implementation":"vault"},"credentialProxy":{}}"#,
            DriverKind::Docker
        ),
        [
            "credentialProxy: no Credential Proxy is built in; leave the key out",
            "credentialGateway.implementation must be kubernetes-secret-gateway",
            "credentialGateway needs the kubernetes Compute Driver (OCC_COMPUTE_DRIVER)",
            "credentialGateway needs a sandbox selected",
        ]
    );
    let ok = Installation::parse(
        &format!(r#"{{"credentialGateway":{{"id":"gw","implementation":"kubernetes-secret-gateway"}},{SANDBOX}}}"#),
        DriverKind::Kubernetes,
    )
    .unwrap();
    assert_eq!(
        ok.credential_gateway,
        Some(CredentialGateway { id: "gw".into() })
    );
}

#[test]
fn errors_name_the_variable_and_the_file() {
    let path = std::env::temp_dir().join(format!("occ-installation-{}.json", std::process::id()));
    std::fs::write(&path, r#"{"credentialProxy":{}}"#).unwrap();
    let e = Installation::load(&path, DriverKind::Docker).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "OCC_INSTALLATION_CONFIG {}: credentialProxy: no Credential Proxy is built in; leave the key out",
            path.display()
        )
    );
    std::fs::remove_file(&path).unwrap();
    let missing = Installation::load(&path, DriverKind::Docker).unwrap_err();
    assert!(missing.to_string().contains("cannot be read"), "{missing}");
}

#[test]
fn s3_a_policy_is_within_a_ceiling_entry_holding_its_network_and_all_its_ports() {
    let rule = |cidr: &str, ports: &[u16]| EgressRule {
        cidr: cidr.into(),
        ports: ports.to_vec(),
    };
    let ceiling = [
        rule("10.0.0.0/8", &[443, 5432]),
        rule("2001:db8::/32", &[443]),
    ];
    assert!(within(&[rule("10.1.0.0/16", &[443])], &ceiling));
    assert!(within(&[rule("10.0.0.0/8", &[443, 5432])], &ceiling));
    assert!(within(&[rule("2001:db8:1::/48", &[443])], &ceiling));
    assert!(within(&[], &[]));
    assert!(!within(&[rule("10.0.0.0/7", &[443])], &ceiling));
    assert!(!within(&[rule("11.0.0.0/8", &[443])], &ceiling));
    assert!(!within(&[rule("10.1.0.0/16", &[80])], &ceiling));
    assert!(!within(&[rule("2001:db8:1::/48", &[5432])], &ceiling));
    assert!(!within(&[rule("10.1.0.0/16", &[443])], &[]));
    assert!(within(
        &[rule("192.168.1.0/24", &[22])],
        &[rule("0.0.0.0/0", &[22])]
    ));
}

// A file cut short names no key path (it used to print a stray `?:`).
#[test]
fn a_truncated_file_names_where_it_ends_without_a_key_path() {
    assert_eq!(
        problems(
            r#"{"lifecycleHooks": [{"driver": "iam""#,
            DriverKind::Docker
        ),
        ["EOF while parsing an object at line 1 column 36"]
    );
}

#[test]
fn g6_the_repository_policy_and_sender_need_each_other_and_a_sandbox() {
    let ca = CaFile::new();
    let sender = |extra: &str| {
        format!(
            r#""repositorySender":{{"id":"git","url":"https://git-sender.example:9444","caFile":"{}"{extra}}}"#,
            ca.path()
        )
    };
    let policy = r#""repositoryPolicy":{"id":"repos","implementation":"occ-repository-policy"}"#;
    // Each needs the other; the sender needs Kubernetes and a sandbox: one line each.
    assert_eq!(
        problems(&format!("{{{}}}", sender("")), DriverKind::Docker),
        [
            "repositorySender needs the kubernetes Compute Driver (OCC_COMPUTE_DRIVER)",
            "repositorySender needs a sandbox selected",
            "repositorySender needs a repositoryPolicy selected",
        ]
    );
    assert_eq!(
        problems(&format!("{{{policy},{SANDBOX}}}"), DriverKind::Kubernetes),
        ["repositoryPolicy needs a repositorySender selected"]
    );
    // Every field is checked, all problems at once.
    assert_eq!(
        problems(
            &format!(
                r#"{{"repositoryPolicy":{{"id":" ","implementation":"opa"}},{SANDBOX},"repositorySender":{{"id":"","url":"http://x","caFile":"/nonexistent/ca.pem","timeoutSeconds":31,"maintenanceIntervalSeconds":0}}}}"#
            ),
            DriverKind::Kubernetes
        ),
        [
            "repositoryPolicy.id must not be blank",
            "repositoryPolicy.implementation must be occ-repository-policy, got \"opa\"",
            "repositorySender.id must not be blank",
            "repositorySender.url must be an https:// URL with a host, got \"http://x\"",
            "repositorySender.timeoutSeconds must be 1-30, got 31",
            "repositorySender.maintenanceIntervalSeconds must be a positive integer, got 0",
            "repositorySender.caFile /nonexistent/ca.pem cannot be read (No such file or directory (os error 2))",
        ]
    );
    assert!(problems(
        &format!(
            "{{{policy},{SANDBOX},{}}}",
            sender(r#","durableBrokerReceipts":"yes""#)
        ),
        DriverKind::Kubernetes
    )[0]
    .starts_with("repositorySender.durableBrokerReceipts: invalid type"));
    // Defaults: a 10 s timeout, a 30 s cleanup interval, no durable broker receipts.
    let ok = Installation::parse(
        &format!("{{{policy},{SANDBOX},{}}}", sender("")),
        DriverKind::Kubernetes,
    )
    .unwrap();
    assert_eq!(
        ok.repository_policy,
        Some(RepositoryPolicy { id: "repos".into() })
    );
    let s = ok.repository_sender.expect("sender");
    assert_eq!(
        (
            s.id.as_str(),
            s.timeout,
            s.cleanup_interval,
            s.durable_broker_receipts
        ),
        (
            "git",
            Duration::from_secs(10),
            DEFAULT_CLEANUP_INTERVAL,
            false
        )
    );
    assert!(!s.ca_pem.is_empty());
    let s = Installation::parse(
        &format!(
            "{{{policy},{SANDBOX},{}}}",
            sender(
                r#","timeoutSeconds":3,"maintenanceIntervalSeconds":5,"durableBrokerReceipts":true"#
            )
        ),
        DriverKind::Kubernetes,
    )
    .unwrap()
    .repository_sender
    .unwrap();
    assert_eq!(
        (s.timeout, s.cleanup_interval, s.durable_broker_receipts),
        (Duration::from_secs(3), Duration::from_secs(5), true)
    );
}
