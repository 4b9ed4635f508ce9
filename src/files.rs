//! Reading the configuration files the worker is pointed at (`OCC_KUBERNETES_CONFIG`,
//! `OCC_INSTALLATION_CONFIG`), bounded in size.
//!
//! This module is the ground floor: it imports nothing of the crate, so `config`,
//! `installation` and `compute` all read their files through it without depending on each
//! other. It only reads; it never parses or validates what it read.

use std::fmt;

/// Why a configuration file named by a variable could not be read.
#[derive(Debug)]
pub enum FileError {
    Io(std::io::Error),
    /// Larger than the limit given, in bytes.
    TooLarge(u64),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Io(e) => write!(f, "cannot be read ({e})"),
            FileError::TooLarge(limit) => write!(f, "is larger than {limit} bytes"),
        }
    }
}

/// The text of a configuration file (`OCC_KUBERNETES_CONFIG`, `OCC_INSTALLATION_CONFIG`),
/// reading at most `limit` bytes of it.
pub fn read_file(path: &std::path::Path, limit: u64) -> Result<String, FileError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(FileError::Io)?;
    let mut text = String::new();
    file.take(limit + 1)
        .read_to_string(&mut text)
        .map_err(FileError::Io)?;
    if text.len() as u64 > limit {
        return Err(FileError::TooLarge(limit));
    }
    Ok(text)
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FileError::Io(e) => Some(e),
            FileError::TooLarge(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_file_is_io_with_its_source() {
        use std::error::Error;
        let e = read_file(std::path::Path::new("/nonexistent/occ-file"), 10).unwrap_err();
        assert!(matches!(e, FileError::Io(_)));
        assert!(e.source().is_some());
    }
}
