//! The library's one error type: a scenario file that cannot be read or is malformed.
//!
//! A scenario whose expectations do not hold is not an error: that is a result
//! ([`crate::check::Outcome`]). Errors here are files that cannot be checked at all, and each
//! message names the file, the key and, where the parser knows it, the line.

use std::path::PathBuf;

/// A scenario file that cannot be checked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file (or a folder named on the command line) could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The YAML or JSON does not make a valid scenario: bad syntax, an unknown key, a value of
    /// the wrong type or out of range, a job that no earlier step submitted, a share that is
    /// not declared. The parser's message carries the key path and the line and column.
    #[error("{}: {}{source}", path.display(), document_prefix(*document))]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based document number within the file (documents are separated by `---`).
        document: usize,
        /// The parser's message, with the key path and the location.
        source: serde_yaml_ng::Error,
    },
    /// The file holds no scenario at all.
    #[error("{}: the file holds no scenario (expected a mapping with name, environment, shares and steps)", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A well-formed file whose content does not make sense (a cluster file's tenant mapped
    /// to a share it does not declare, say).
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A folder named on the command line holds no scenario file.
    #[error("{}: the folder holds no scenario file (.yaml, .yml or .json)", path.display())]
    EmptyFolder {
        /// The folder.
        path: PathBuf,
    },
}

fn document_prefix(document: usize) -> String {
    if document > 1 {
        format!("document {document}: ")
    } else {
        String::new()
    }
}
