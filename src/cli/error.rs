//! A command's failure (`CliError`): one line, or one line per problem, and the exit code it
//! maps to. Every other file of the CLI stands above it.

use std::fmt;

/// A command failure: one line (or one line per problem, `config_lines`), and the exit code
/// it maps to.
#[derive(Debug)]
pub struct CliError {
    message: String,
    code: u8,
    /// The message holds several problems, one per line.
    several: bool,
}

impl CliError {
    pub fn new(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            code: 1,
            several: false,
        }
    }

    /// A failure with its own exit code (`wait::FAILED`, `wait::TIMED_OUT`).
    pub fn with_code(message: impl Into<String>, code: u8) -> CliError {
        CliError {
            message: message.into(),
            code,
            several: false,
        }
    }

    /// Invalid configuration or usage (exit 2).
    pub fn config(message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            code: 2,
            several: false,
        }
    }

    /// Several problems as things stand, each one line of its own (exit 1).
    pub fn lines(lines: impl IntoIterator<Item = String>) -> CliError {
        CliError {
            code: 1,
            ..CliError::config_lines(lines)
        }
    }

    /// Invalid configuration with several problems, each one line of its own (exit 2).
    pub fn config_lines(lines: impl IntoIterator<Item = String>) -> CliError {
        CliError {
            message: lines
                .into_iter()
                .map(|l| l.replace('\n', " "))
                .collect::<Vec<_>>()
                .join("\n"),
            code: 2,
            several: true,
        }
    }

    pub fn exit_code(&self) -> u8 {
        self.code
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line per problem, always.
        if self.several {
            f.write_str(&self.message)
        } else {
            f.write_str(&self.message.replace('\n', " "))
        }
    }
}

/// Any error becomes its whole chain on one line (`db::error_chain`), so the cause a wrapper
/// keeps as its source is printed too.
impl<E: std::error::Error> From<E> for CliError {
    fn from(e: E) -> CliError {
        CliError::new(occ_worker::db::error_chain(&e))
    }
}
