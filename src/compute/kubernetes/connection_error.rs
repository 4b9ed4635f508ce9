//! `ConnectionError`, why the API server connection could not be configured: in-cluster
//! files, a kubeconfig or an exec credential plugin (SPEC C3). Its own module, below both
//! `connection` and `exec`, so neither imports the other's error. One line naming the source
//! and what is wrong, never a secret. A failing exec plugin's own last stderr line (its hint,
//! as kubectl shows it) rides along for the CLI's one-line message only: `logged` leaves it
//! out, and logs use that (SPEC W7: logs never carry provider free text).

use std::fmt;

/// The documented kinds of connection errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionErrorKind {
    /// Neither in-cluster variables nor a kubeconfig were found.
    NotConfigured,
    /// A file could not be read.
    Io,
    /// The kubeconfig is not YAML of the kubeconfig shape.
    Malformed,
    /// The named context, or the cluster or user it names, is missing or incomplete.
    Missing,
    /// The configuration asks for something occ-worker does not support.
    Unsupported,
    /// A certificate, key or token is unusable (bad base64 or PEM, empty).
    Credential,
}

/// A connection error: one line naming the source and what is wrong, never a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionError {
    kind: ConnectionErrorKind,
    message: String,
    /// What a failing exec plugin said last on stderr: provider free text.
    hint: Option<String>,
}

impl ConnectionError {
    pub(crate) fn new(kind: ConnectionErrorKind, message: impl Into<String>) -> ConnectionError {
        let message: String = message.into();
        ConnectionError {
            kind,
            message: message.split_whitespace().collect::<Vec<_>>().join(" "),
            hint: None,
        }
    }

    /// With a failing exec plugin's last stderr line, for the CLI's message only.
    pub(crate) fn with_hint(mut self, hint: Option<String>) -> ConnectionError {
        self.hint = hint;
        self
    }

    pub fn kind(&self) -> ConnectionErrorKind {
        self.kind
    }

    /// The error as a log line may carry it: without the plugin's own words.
    pub fn logged(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        match &self.hint {
            Some(said) => write!(f, ": it said {said:?}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for ConnectionError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_s_hint_is_in_the_message_and_never_in_the_logged_line() {
        let e = ConnectionError::new(ConnectionErrorKind::Io, "exec plugin \"gcloud\" failed")
            .with_hint(Some("run: gcloud auth login".into()));
        assert_eq!(
            e.to_string(),
            "exec plugin \"gcloud\" failed: it said \"run: gcloud auth login\""
        );
        assert_eq!(e.logged(), "exec plugin \"gcloud\" failed");
    }
}
