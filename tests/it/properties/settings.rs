//! The Kubernetes driver file (`OCC_KUBERNETES_CONFIG`): parsed, or refused in one line naming
//! the key.

use super::{clear_error, holds, run, text_near};
use occ_worker::compute::kubernetes::settings::Settings;

#[test]
fn the_kubernetes_driver_file_parses_or_names_the_problem_and_never_panics() {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/driver.json"),
    )
    .unwrap();
    let valid: serde_json::Value = serde_json::from_str(&text).unwrap();
    Settings::parse(&text).expect("the valid file");
    holds(run(
        file!(),
        super::cases(3000),
        text_near(valid),
        |text| match Settings::parse(&text) {
            Ok(settings) => {
                let _ = settings.image_for(
                    "codex",
                    "1.0.0",
                    occ_worker::compute::HarnessMode::Dedicated,
                );
                Ok(())
            }
            Err(e) => clear_error(&e.to_string(), 1),
        },
    ));
}
