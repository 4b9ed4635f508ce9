//! The Installation configuration file (`OCC_INSTALLATION_CONFIG`): parsed for either Compute
//! Driver, or refused with one line per problem.

use super::{clear_error, holds, run, text_near};
use crate::hook_server::HookServer;
use occ_worker::config::DriverKind;
use occ_worker::installation::Installation;
use proptest::prelude::*;
use serde_json::json;

#[test]
fn the_installation_file_parses_or_names_each_problem_and_never_panics() {
    let dir = crate::kube_e2e::scratch("prop-installation");
    let hooks = HookServer::start(&dir);
    let valid = json!({
        "lifecycleHooks": [hooks.entry("configuration", &["beforeWorkloadStart", "beforeWorkloadStop"], 5)],
        "sandbox": {"id": "sandbox-1", "implementation": "kubernetes-sandbox",
                    "facets": ["runtime-class", "default-deny-egress"], "runtimeClassName": "gvisor"},
        "sandboxNetworkPolicyCeiling": [{"cidr": "10.0.0.0/8", "ports": [443, 5432]},
                                        {"cidr": "fd00::/8", "ports": [443]}],
        "credentialGateway": {"id": "gw", "implementation": "kubernetes-secret-gateway"},
    });
    Installation::parse(&valid.to_string(), DriverKind::Kubernetes).expect("the valid file");
    holds(run(
        file!(),
        super::cases(3000),
        (text_near(valid), any::<bool>()),
        |(text, kubernetes)| {
            let driver = if kubernetes {
                DriverKind::Kubernetes
            } else {
                DriverKind::Docker
            };
            match Installation::parse(&text, driver) {
                Ok(installation) => {
                    let _ = installation.lifecycle_hooks();
                    let _ = installation.sandbox_selection();
                    Ok(())
                }
                Err(e) => {
                    let message = e.to_string();
                    clear_error(&message, 64)?;
                    prop_assert!(message.lines().all(|l| !l.trim().is_empty()), "{message}");
                    Ok(())
                }
            }
        },
    ));
}
