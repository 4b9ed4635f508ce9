//! The documented environment variables: one variable's name, what leaving it unset means and
//! its help line, for `config::VARIABLES` and the Kubernetes connection's own table.
//!
//! This module is the ground floor: it imports nothing of the crate, so `config` and
//! `compute` both describe their variables with it without depending on each other. It never
//! reads the environment.

/// What an unset (or blank) variable means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unset {
    /// Start-up stops: the variable must be set.
    Required,
    /// Start-up stops in the case named (`with OCC_COMPUTE_DRIVER=kubernetes`).
    RequiredWhen(&'static str),
    /// This value is used.
    Default(&'static str),
    /// No value is used; the text says what happens instead.
    Means(&'static str),
}

/// One environment variable: its name, what leaving it unset means, and one line of help.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    pub name: &'static str,
    pub unset: Unset,
    pub help: &'static str,
}
