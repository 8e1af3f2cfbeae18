//! The library's error type. Every variant names what was wrong and where, so the CLI can
//! print it as is and exit with code 2 (bad input) or 1 (internal failure). Every chapter
//! returns it; chapter 9's checkpoint problems are typed ([`CheckpointProblem`]).

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
    /// A checkpoint file (or the directory holding it) is not what it claims to be; the
    /// problem is typed, so a caller can tell a truncated file from a wrong shape.
    #[error("{}: {}{problem}", file.display(), tensor.as_ref().map(|t| format!("tensor `{t}`: ")).unwrap_or_default())]
    Checkpoint {
        file: PathBuf,
        /// The tensor at fault, when the problem is one tensor's.
        tensor: Option<String>,
        problem: CheckpointProblem,
    },
    /// An output file could not be written: our failure or the machine's, not the input's.
    #[error("{path}: cannot write: {source}", path = path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
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
        !matches!(self, Error::Figure { .. } | Error::Write { .. })
    }
}

/// What is wrong with a checkpoint, by kind; the strings carry only the details a person
/// needs to find the fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointProblem {
    /// The path given as a model directory is not one.
    #[error("not a directory")]
    NotADirectory,
    /// The directory holds no safetensors file.
    #[error("no model.safetensors, model.safetensors.index.json or *.safetensors file")]
    NoWeights,
    /// The file ends before the bytes its header promises (or before its header).
    #[error("{0} (truncated file or corrupt header)")]
    Truncated(String),
    /// A header or index that is not well-formed: not JSON, or a missing or mistyped entry.
    #[error("{0}")]
    Malformed(String),
    /// A tensor the model needs is absent.
    #[error("missing from the checkpoint")]
    Missing,
    /// None of the names a part of the model may have is present.
    #[error("no {what} (looked for {})", names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "))]
    NoneOf { what: String, names: Vec<String> },
    /// A tensor with a different number of dimensions than its role needs.
    #[error("shape {found:?}, expected {expected}-D")]
    Rank { found: Vec<usize>, expected: usize },
    /// The index lists a tensor that its shard does not hold.
    #[error("missing from {}", .0.display())]
    MissingFromShard(PathBuf),
    /// The index names one shard for a tensor, but another shard holds it.
    #[error("listed in {} but found in {}", listed.display(), found.display())]
    Misplaced { listed: PathBuf, found: PathBuf },
    /// The same tensor name twice (in one header or across shards).
    #[error("appears again (first in {})", first.display())]
    Duplicate { first: PathBuf },
    /// Two tensors whose byte ranges share bytes (a lying header could alias them).
    #[error("overlaps tensor `{0}`")]
    Overlap(String),
    /// A shape other than the one config.json implies.
    #[error("shape {found:?}, expected {expected:?}")]
    Shape {
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    /// A dtype the kernels cannot use.
    #[error("dtype {found}, expected {expected}")]
    Dtype { found: String, expected: String },
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
