//! The library's error type. Every variant names what was wrong and where, so the CLI can
//! print it as is and exit with code 2 (bad input) or 1 (internal failure).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A JSON document (config.json, rope_scaling, ...) is malformed.
    #[error("{what}: invalid JSON: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// A field is missing, of the wrong type, or out of range.
    #[error("{what}: field `{field}`: {problem}")]
    Field {
        what: String,
        field: String,
        problem: String,
    },
    /// Any other invalid argument supplied by the user.
    #[error("{0}")]
    Invalid(String),
    /// Drawing a figure failed.
    #[error("figure {name}: {message}")]
    Figure { name: String, message: String },
}

impl Error {
    /// A missing, mistyped or out-of-range field in a named document.
    pub fn field(
        what: impl Into<String>,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Error::Field {
            what: what.into(),
            field: field.into(),
            problem: problem.into(),
        }
    }

    /// True when the error is the user's input (exit code 2) rather than ours (exit code 1).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, Error::Figure { .. })
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Reads a file, naming it in the error.
pub fn read_file(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads and parses a JSON file, naming it in the error.
pub fn read_json(path: &std::path::Path) -> Result<serde_json::Value> {
    let bytes = read_file(path)?;
    serde_json::from_slice(&bytes).map_err(|source| Error::Json {
        what: path.display().to_string(),
        source,
    })
}
