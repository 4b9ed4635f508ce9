//! Every environment variable `Config::from_lookup` reads: any set of them, set to anything,
//! is a configuration or one line naming the variable.

use super::{clear_error, edgy_string, holds, run};
use occ_worker::config::{Config, VARIABLES};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// A plausible value for `name`, or anything.
fn value_for(name: &'static str) -> BoxedStrategy<String> {
    let plausible: Vec<&str> = match name {
        "OCC_DATABASE_URL" => vec![
            "postgres://occ@127.0.0.1:5432/occ",
            "postgres://occ:pw@db.example/occ?sslmode=verify-full&sslrootcert=/nonexistent",
            "host=/tmp dbname=occ",
        ],
        "OCC_COMPUTE_DRIVER" => vec!["docker", "kubernetes"],
        "OCC_WORKER_MODE" => vec!["development", "production"],
        "OCC_WORKER_HTTP_ADDR" => vec!["127.0.0.1:0", "0.0.0.0:9464", "[::1]:9464"],
        "OCC_DOCKER_SUBNET_POOL" => vec!["172.16.0.0/12", "10.0.0.0/8"],
        _ => vec!["1", "5000", "8"],
    };
    prop_oneof![
        2 => prop::sample::select(plausible).prop_map(str::to_string),
        3 => edgy_string(),
    ]
    .boxed()
}

fn environment() -> impl Strategy<Value = BTreeMap<&'static str, String>> {
    let each: Vec<_> = VARIABLES
        .iter()
        .map(|v| prop::option::weighted(0.5, value_for(v.name)).prop_map(move |o| (v.name, o)))
        .collect();
    each.prop_map(|pairs| {
        pairs
            .into_iter()
            .filter_map(|(name, value)| value.map(|v| (name, v)))
            .collect()
    })
}

#[test]
fn every_environment_variable_parses_or_names_the_variable_and_never_panics() {
    holds(run(
        file!(),
        super::cases(4000),
        environment(),
        |set| match Config::from_lookup(|name| set.get(name).cloned()) {
            Ok(_) => Ok(()),
            Err(e) => {
                let message = e.to_string();
                clear_error(&message, 1)?;
                prop_assert!(
                    VARIABLES.iter().any(|v| message.contains(v.name)),
                    "names no variable: {message}"
                );
                Ok(())
            }
        },
    ));
}
