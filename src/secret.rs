//! The Secret Driver seam (SPEC Z4): which Secret Driver this
//! worker provides, and the start-up check that it is the one the Installation selects.
//!
//! The worker never reads a secret value: a Secret is a backend reference that the Compute
//! Driver hands to the runtime (Kubernetes `secretKeyRef`). A Secret Driver owns such Secrets
//! (`occ.secrets.driver_id`); the Installation selects one (`occ.installation.secret_driver_id`),
//! every revision freezes that selection at admission, and a pass counts only Secrets of the
//! selected driver. This module holds no database code and opens no socket.

use std::fmt;

/// The operations a Secret Driver must offer.
pub const SECRET_OPERATIONS: &[&str] = &["create", "update", "delete", "resolve"];

/// The built-in Secret Driver's id, and the default of `OCC_SECRET_DRIVER`.
pub const DEFAULT_SECRET_DRIVER: &str = "occ-secrets";

/// A Secret Driver as the worker sees it: its id, implementation, capability and operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretDriver {
    pub id: String,
    pub implementation: &'static str,
    pub capability: &'static str,
    pub operations: &'static [&'static str],
}

impl SecretDriver {
    /// The built-in driver: Secrets are backend references (`NAMESPACE/NAME/KEY` plus the
    /// backend object's uid) that the Compute Driver projects; admission creates, updates and
    /// deletes the rows, and a pass resolves them to metadata.
    pub fn reference(id: &str) -> SecretDriver {
        SecretDriver {
            id: id.to_string(),
            implementation: "reference",
            capability: "secret",
            operations: SECRET_OPERATIONS,
        }
    }

    /// Whether the driver is usable at all: a non-blank id and implementation, the `secret`
    /// capability and every operation.
    pub fn valid(&self) -> bool {
        !self.id.trim().is_empty()
            && !self.implementation.trim().is_empty()
            && self.capability == "secret"
            && SECRET_OPERATIONS
                .iter()
                .all(|op| self.operations.contains(op))
    }

    /// The start-up check: when the Installation selects a Secret Driver, this one must be
    /// valid and be it. An Installation that selects none needs nothing (revisions with Secret
    /// bindings then fail `SECRET_DRIVER_MISMATCH`).
    pub fn check_selected(&self, selected: Option<&str>) -> Result<(), SecretDriverError> {
        let Some(selected) = selected else {
            return Ok(());
        };
        if !self.valid() {
            return Err(SecretDriverError::Unavailable {
                selected: selected.to_string(),
            });
        }
        if self.id != selected {
            return Err(SecretDriverError::Mismatch {
                configured: self.id.clone(),
                selected: selected.to_string(),
            });
        }
        Ok(())
    }
}

/// Why start-up refuses the Secret Driver; one line naming `OCC_SECRET_DRIVER`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretDriverError {
    /// The selected driver is not a valid Secret Driver.
    Unavailable { selected: String },
    /// This worker's driver is not the selected one.
    Mismatch {
        configured: String,
        selected: String,
    },
}

impl fmt::Display for SecretDriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretDriverError::Unavailable { selected } => write!(
                f,
                "invalid configuration: OCC_SECRET_DRIVER: the Secret Driver {selected:?} the Installation selects is unavailable"
            ),
            SecretDriverError::Mismatch {
                configured,
                selected,
            } => write!(
                f,
                "invalid configuration: OCC_SECRET_DRIVER is {configured:?} but the Installation selects Secret Driver {selected:?}"
            ),
        }
    }
}

impl std::error::Error for SecretDriverError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selected_driver_must_be_valid_and_be_this_one() {
        let ours = SecretDriver::reference("occ-secrets");
        assert_eq!(ours.check_selected(None), Ok(()));
        assert_eq!(ours.check_selected(Some("occ-secrets")), Ok(()));
        let e = ours.check_selected(Some("vault")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid configuration: OCC_SECRET_DRIVER is \"occ-secrets\" but the Installation selects Secret Driver \"vault\""
        );
        let no_capability = SecretDriver {
            capability: "sandbox",
            ..SecretDriver::reference("occ-secrets")
        };
        assert!(matches!(
            no_capability.check_selected(Some("occ-secrets")),
            Err(SecretDriverError::Unavailable { .. })
        ));
        let no_resolve = SecretDriver {
            operations: &["create", "update", "delete"],
            ..SecretDriver::reference("occ-secrets")
        };
        assert!(!no_resolve.valid());
    }
}
