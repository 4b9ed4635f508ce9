//! The `occ-worker` binary: the worker and the operator's tool (SPEC section 9).
//!
//! `main` is the only place that maps errors to exit codes; every command returns a `Result`
//! whose error is printed as one line.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            for line in e.to_string().lines() {
                eprintln!("occ-worker: {line}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}
