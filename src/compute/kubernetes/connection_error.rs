//! `ConnectionError`, why the API server connection could not be configured: in-cluster
//! files, a kubeconfig or an exec credential plugin (SPEC C3). Its own module, below both
//! `connection` and `exec`, so neither imports the other's error. One line naming the source
//! and what is wrong, never a secret.

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
}

impl ConnectionError {
    pub(crate) fn new(kind: ConnectionErrorKind, message: impl Into<String>) -> ConnectionError {
        let message: String = message.into();
        ConnectionError {
            kind,
            message: message.split_whitespace().collect::<Vec<_>>().join(" "),
        }
    }

    pub fn kind(&self) -> ConnectionErrorKind {
        self.kind
    }
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConnectionError {}
