//! Lifecycle hook answers (SPEC H3-H5): whatever a webhook answers — any status, any body —
//! the call allows, refuses with a code, or is unavailable; a launch value never reaches an
//! error.

use super::{holds, json, near, near_bytes, run};
use crate::hook_server::{Answer, HookServer};
use occ_worker::cancel::CancelToken;
use occ_worker::compute::hooks::{HookSubject, Phase};
use occ_worker::config::DriverKind;
use occ_worker::installation::Installation;
use proptest::prelude::*;
use serde_json::json;

/// A launch value no error may repeat.
/// The planted value: a canary (tests/canary.rs) the suite's log scan looks for.
fn launch_value() -> &'static str {
    static VALUE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VALUE.get_or_init(|| format!("opaque-{}", crate::support::canary("launch-value")))
}

#[test]
fn a_lifecycle_hook_answer_allows_refuses_or_is_unavailable_and_never_panics() {
    let dir = crate::kube_e2e::scratch("prop-hooks");
    let server = HookServer::start(&dir);
    let file =
        json!({"lifecycleHooks": [server.entry("configuration", &["beforeWorkloadStart"], 5)]});
    let installation = Installation::parse(&file.to_string(), DriverKind::Kubernetes).unwrap();
    let hooks = installation.lifecycle_hooks().unwrap();
    let subject = HookSubject {
        installation_id: "inst",
        namespace_id: "ns-1",
        agent_id: Some("ag-1"),
        revision_id: Some("rev-1"),
        compute_driver_id: "kubernetes",
    };
    let cancel = CancelToken::unbounded();
    let allow =
        json!({"allowed": true, "launchValues": {"MODEL_URL": launch_value(), "TEAM": "opaque-b"}});
    let deny = json!({"allowed": false, "code": "POLICY_DENIED"});
    server.answer(
        "configuration",
        "beforeWorkloadStart",
        Answer::Raw(200, allow.to_string().into_bytes()),
    );
    let values = hooks
        .run(Phase::BeforeWorkloadStart, &subject, &["TAKEN"], &cancel)
        .expect("the valid answer");
    assert_eq!(values.iter().count(), 2);
    let status = prop::sample::select(vec![200, 200, 200, 200, 201, 204, 302, 400, 403, 500, 503]);
    let body = prop_oneof![
        4 => near(allow.clone()).prop_map(|v| v.to_string().into_bytes()),
        2 => near(deny).prop_map(|v| v.to_string().into_bytes()),
        1 => json().prop_map(|v| v.to_string().into_bytes()),
        1 => near_bytes(allow.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..128),
    ];
    holds(run(
        file!(),
        super::cases(400),
        (status, body),
        |(status, body)| {
            server.answer(
                "configuration",
                "beforeWorkloadStart",
                Answer::Raw(status, body),
            );
            match hooks.run(Phase::BeforeWorkloadStart, &subject, &["TAKEN"], &cancel) {
                Ok(values) => {
                    prop_assert!(values.iter().all(|(name, _)| name != "TAKEN"));
                    Ok(())
                }
                Err(e) => {
                    let shown = format!("{e} {e:?}");
                    prop_assert!(
                        !shown.contains(launch_value()),
                        "a launch value in: {shown}"
                    );
                    Ok(())
                }
            }
        },
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
