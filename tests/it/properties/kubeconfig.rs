//! Kubeconfigs (`KUBECONFIG`, token, certificate and exec users) and what an exec credential
//! plugin prints (`ExecCredential`): a connection or a token, or one error that never repeats
//! a credential.

use super::{clear_error, holds, near, near_bytes, run, text_near};
use crate::kube_fake::tls::new_ca;
use base64::Engine;
use occ_worker::compute::kubernetes::{connection, exec};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::time::Duration;

/// A credential value no error may repeat.
/// The planted value: a canary (tests/canary.rs) the suite's log scan looks for.
fn credential() -> &'static str {
    static VALUE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VALUE.get_or_init(|| crate::support::canary("kube-credential"))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn valid_kubeconfig(ca_pem: &str, plugin_output: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "token",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443/prefix",
                                               "certificate-authority-data": b64(ca_pem.as_bytes())}}],
        "contexts": [
            {"name": "token", "context": {"cluster": "k", "user": "token", "namespace": "ns"}},
            {"name": "exec", "context": {"cluster": "k", "user": "exec"}},
            {"name": "cert", "context": {"cluster": "k", "user": "cert"}},
        ],
        "users": [
            {"name": "token", "user": {"token": credential()}},
            {"name": "exec", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": "/bin/cat", "args": [plugin_output],
                "env": [{"name": "SECRET", "value": credential()}]}}},
            {"name": "cert", "user": {"client-certificate-data": b64(ca_pem.as_bytes()),
                                      "client-key-data": b64(credential().as_bytes())}},
        ],
    })
}

#[test]
fn a_kubeconfig_resolves_or_names_the_problem_without_its_credentials() {
    let dir = crate::kube_e2e::scratch("prop-kubeconfig");
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, _) = new_ca("prop-ca");
    let output = dir.join("plugin-output.json");
    std::fs::write(&output, "{}").unwrap();
    let valid = valid_kubeconfig(&ca.pem(), &output.display().to_string());
    let path = dir.join("kubeconfig");
    std::fs::write(&path, valid.to_string()).unwrap();
    connection::from_kubeconfig(&path, None).expect("the valid kubeconfig");
    let context = prop::option::of(prop::sample::select(vec!["token", "exec", "cert", "none"]));
    holds(run(
        file!(),
        super::cases(2000),
        (text_near(valid), context),
        |(text, context)| {
            std::fs::write(&path, &text).unwrap();
            match connection::from_kubeconfig(&path, context) {
                Ok(_) => Ok(()),
                Err(e) => {
                    let message = e.to_string();
                    clear_error(&message, 1)?;
                    prop_assert!(
                        !message.contains(credential()),
                        "a credential in: {message}"
                    );
                    Ok(())
                }
            }
        },
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_exec_plugins_answer_is_a_token_or_an_error_without_it() {
    let dir = crate::kube_e2e::scratch("prop-exec");
    std::fs::create_dir_all(&dir).unwrap();
    let output = dir.join("plugin-output.json");
    let config: exec::ExecConfig = serde_json::from_value(json!({
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "/bin/cat",
        "args": [output.display().to_string()],
    }))
    .unwrap();
    let valid = json!({
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": credential(), "expirationTimestamp": "2030-01-02T03:04:05Z"},
    });
    std::fs::write(&output, valid.to_string()).unwrap();
    let token = exec::run(&config, &dir, Duration::from_secs(5)).expect("the valid answer");
    assert_eq!(token.token, credential());
    let answers = prop_oneof![
        4 => near(valid.clone()).prop_map(|v| v.to_string().into_bytes()),
        2 => near_bytes(valid.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..256),
    ];
    holds(run(file!(), super::cases(600), answers, |answer| {
        std::fs::write(&output, &answer).unwrap();
        match exec::run(&config, &dir, Duration::from_secs(5)) {
            Ok(_) => Ok(()),
            Err(e) => {
                let message = e.to_string();
                clear_error(&message, 1)?;
                prop_assert!(!message.contains(credential()), "the token in: {message}");
                Ok(())
            }
        }
    }));
    let _ = std::fs::remove_dir_all(&dir);
}
