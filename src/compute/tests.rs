//! Unit tests of the contract's pure parts: codes, diagnostics, observations and the worker's
//! own execution-admission check.

use super::*;

#[test]
fn codes_are_bounded_tokens() {
    assert!(is_code("REVISION_INCOMPLETE"));
    assert!(!is_code("revision incomplete"));
    assert!(!is_code(""));
    assert!(!is_code(&"A".repeat(65)));
}

#[test]
fn prepare_diagnostics_are_kept_only_within_the_seeds_bounds() {
    // SPEC Z6.
    let ok = PrepareDiagnostic {
        error_class: Some("ApiError".into()),
        message: Some("x".repeat(256)),
        status: Some(999),
        ..PrepareDiagnostic::new("A_1", "s_1")
    };
    assert!(ok.valid());
    let broken = [
        PrepareDiagnostic::new("", "s"),
        PrepareDiagnostic::new(&"A".repeat(65), "s"),
        PrepareDiagnostic::new("1A", "s"),
        PrepareDiagnostic::new("A", "S"),
        PrepareDiagnostic {
            error_class: Some("Api_Error".into()),
            ..PrepareDiagnostic::new("A", "s")
        },
        PrepareDiagnostic {
            message: Some("x".repeat(257)),
            ..PrepareDiagnostic::new("A", "s")
        },
        PrepareDiagnostic {
            message: Some("tab\there".into()),
            ..PrepareDiagnostic::new("A", "s")
        },
        PrepareDiagnostic {
            message: Some("del\u{7f}".into()),
            ..PrepareDiagnostic::new("A", "s")
        },
        PrepareDiagnostic {
            status: Some(1000),
            ..PrepareDiagnostic::new("A", "s")
        },
    ];
    for d in broken {
        assert!(!d.valid(), "{d:?}");
    }
}

#[test]
fn z1_the_workers_own_check_allows_exactly_version_5_standard() {
    let spec = |version: u32, mode: &str| {
        let mut spec = test_revision();
        spec.execution_admission = ExecutionAdmission {
            version,
            mode: mode.into(),
        };
        spec
    };
    assert!(check_execution_admission(&spec(5, "standard")).is_ok());
    for (version, mode) in [(4, "standard"), (6, "standard"), (5, "protected")] {
        let e = check_execution_admission(&spec(version, mode)).unwrap_err();
        assert_eq!(
            e.kind(),
            &ComputeErrorKind::Permanent("EXECUTION_ADMISSION_UNAVAILABLE".into())
        );
    }
    assert!(ExecutionAdmission::valid_mode("standard"));
    assert!(ExecutionAdmission::valid_mode(&"a".repeat(32)));
    for bad in ["", "Standard", "_a", "a1", &"a".repeat(33)] {
        assert!(!ExecutionAdmission::valid_mode(bad), "{bad}");
    }
}

#[test]
fn z3_a_preparation_failure_is_permanent_and_carries_its_evidence() {
    let evidence = serde_json::json!({"stage": "seed"});
    let e = ComputeError::preparation_failed("PREP", "test", Some(evidence.clone()));
    assert_eq!(e.kind(), &ComputeErrorKind::Permanent("PREP".into()));
    assert!(e.is_preparation_failure());
    assert_eq!(e.preparation_evidence(), Some(&evidence));
    let bare = ComputeError::preparation_failed("PREP", "test", None);
    assert!(bare.is_preparation_failure() && bare.preparation_evidence().is_none());
    assert!(!ComputeError::permanent("PREP", "test", None).is_preparation_failure());
}

fn test_revision() -> RevisionSpec {
    RevisionSpec {
        installation_id: "inst".into(),
        namespace_id: "ns1".into(),
        agent_id: "ag".into(),
        revision_id: "rev".into(),
        revision: 1,
        service_principal_id: "sp".into(),
        harness_id: "codex".into(),
        harness_version: "1.0.0".into(),
        harness_mode: HarnessMode::Dedicated,
        execution_mode: "dedicated".into(),
        document: serde_json::json!({}),
        harness_auth: None,
        secret_bindings: serde_json::json!({}),
        secrets: vec![],
        harness_secret: None,
        managed_account: None,
        backend_id: None,
        plugin_ids: vec![],
        execution_admission: ExecutionAdmission::standard(),
        sandbox_facets: Vec::new(),
        credential_sources: Vec::new(),
        workspace_setup: None,
        sandbox_driver_id: None,
        repository: None,
    }
}

#[test]
fn reasons_are_stripped_to_tokens() {
    let e = ComputeError::transient("http", Some(503)).with_reason("Service Unavailable!");
    assert_eq!(e.reason(), Some("ServiceUnavailable"));
    assert!(e.is_transient());
}
