//! The library's error type. Every variant names what was wrong and where, so the CLI can
//! print it as is and exit with code 2 (bad input) or 1 (internal failure). Every chapter
//! returns it; chapter 9's checkpoint problems are typed ([`CheckpointProblem`]).

use crate::limits::{JSON_FILE_BYTES, TEXT_FILE_BYTES};
use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

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
    /// A size read from a file or a flag is past what the format allows or the machine can
    /// hold ([`crate::limits`]): the document or command, the field or flag, the value, the
    /// limit and the reason for it.
    #[error(transparent)]
    Limit(#[from] crate::limits::Exceeded),
    /// A path that is not the kind of file it must be (a FIFO given as config.json, a
    /// symbolic link given as an output, a file larger than its kind may be).
    #[error("{}: {problem}", path.display())]
    File { path: PathBuf, problem: FileProblem },
    /// Numbers that must be finite are not (NaN or ±inf): `what` names where they came from
    /// (a tensor, a layer and position, a RoPE field, a sampling parameter).
    #[error("{what}: {detail}")]
    NonFinite { what: String, detail: String },
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

    /// A problem with one tensor of a checkpoint or GGUF file. A name of a megabyte would
    /// make a message of a megabyte, so a long one is cut.
    pub fn tensor(file: &Path, tensor: &str, problem: CheckpointProblem) -> Self {
        let tensor = match tensor.char_indices().nth(EXCERPT_CHARS * 2) {
            None => tensor.to_string(),
            Some((cut, _)) => format!("{}… ({} bytes)", &tensor[..cut], tensor.len()),
        };
        Error::Checkpoint {
            file: file.to_path_buf(),
            tensor: Some(tensor),
            problem,
        }
    }

    /// True when the error is the user's input (exit code 2) rather than ours (exit code 1).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, Error::Figure { .. } | Error::Write { .. })
    }
}

/// What is wrong with a path, by kind (see [`read_bounded`] and [`crate::output`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileProblem {
    /// A FIFO, device, socket or directory where a regular file is read.
    #[error("is a {0}, not a regular file")]
    NotRegular(&'static str),
    /// A symbolic link whose target does not exist.
    #[error("is a symbolic link to a file that does not exist")]
    DanglingLink,
    /// A symbolic link that (through others) points back at itself.
    #[error("is a loop of symbolic links")]
    LinkLoop,
    /// Larger than any file of its kind (see [`crate::limits`]).
    #[error("{size} bytes, more than the {limit} bytes a {kind} may have")]
    TooLarge {
        size: u64,
        limit: u64,
        kind: &'static str,
    },
    /// An output path that is a symbolic link to something other than a device or FIFO:
    /// neither the link nor its target is replaced.
    #[error("is a symbolic link{}; refusing to replace it or its target (give the target's path)", target.as_ref().map(|t| format!(" to {t}")).unwrap_or_default())]
    OutputLink { target: Option<String> },
    /// An output path that is neither a regular file, a character device nor a FIFO.
    #[error(
        "is a {0}; output is written only to a regular file (replaced atomically), a character device or a FIFO"
    )]
    OutputKind(&'static str),
    /// An output FIFO that no process has open for reading (writing would block forever).
    #[error("is a FIFO that no process is reading")]
    NoReader,
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
    /// A GGUF tensor of a ggml type this crate does not read: the type's id and ggml's
    /// name for it ("16 (iq2_xxs)"), and the types that are read.
    #[error("type {found} is not supported: supported are {supported}")]
    UnsupportedType { found: String, supported: String },
}

pub type Result<T> = std::result::Result<T, Error>;

/// At most this many characters of an input are quoted in a message.
pub const EXCERPT_CHARS: usize = 60;

/// `text` as messages quote it: whole if short, else its first [`EXCERPT_CHARS`]
/// characters and how long it was, so a 10 MB line does not become a 10 MB message.
pub fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &text[..cut], text.len()),
    }
}

/// A JSON value as messages quote it: whole if short, else cut like [`excerpt`].
pub fn excerpt_json(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Array(a) if a.len() > 16 => format!("a list of {} items", a.len()),
        serde_json::Value::Object(o) if o.len() > 16 => format!("an object of {} keys", o.len()),
        serde_json::Value::String(s) => excerpt(s),
        _ => {
            let text = v.to_string();
            match text.char_indices().nth(EXCERPT_CHARS) {
                None => text,
                Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
            }
        }
    }
}

// ------------------------------------------------------------------------ input files
//
// Every input this crate reads whole goes through [`read_file`] / [`read_json`], every file
// it opens to map through [`open_regular`]. Only regular files are read: a FIFO would block
// the read forever, `/dev/zero` would never end and a directory has no bytes, so each is
// refused with [`FileProblem::NotRegular`] naming its kind; a dangling symbolic link or a
// loop of links says so instead of "No such file or directory". The open itself cannot
// block (it is non-blocking, and the file is checked again once open), and no read takes
// more than the limit of its kind ([`crate::limits`]), whatever the file's size claims.

fn file_error(path: &Path, problem: FileProblem) -> Error {
    Error::File {
        path: path.to_path_buf(),
        problem,
    }
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The kind of a file that is not a regular one, as messages name it.
pub fn kind_name(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "character device";
        }
        if t.is_block_device() {
            return "block device";
        }
        if t.is_socket() {
            return "socket";
        }
    }
    if t.is_dir() {
        "directory"
    } else if t.is_symlink() {
        "symbolic link"
    } else if t.is_file() {
        "regular file"
    } else {
        "special file"
    }
}

/// What failing to open or stat `path` means: a dangling link or a loop of links is named
/// as such; anything else is the operating system's message.
fn open_error(path: &Path, e: std::io::Error) -> Error {
    #[cfg(unix)]
    if e.raw_os_error() == Some(libc::ELOOP) {
        return file_error(path, FileProblem::LinkLoop);
    }
    if e.kind() == std::io::ErrorKind::NotFound
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
    {
        return file_error(path, FileProblem::DanglingLink);
    }
    io_error(path, e)
}

/// The metadata of `path` (links followed) if it is a regular file, else the problem.
pub fn regular_metadata(path: &Path) -> Result<Metadata> {
    let meta = std::fs::metadata(path).map_err(|e| open_error(path, e))?;
    if meta.is_file() {
        Ok(meta)
    } else {
        Err(file_error(
            path,
            FileProblem::NotRegular(kind_name(meta.file_type())),
        ))
    }
}

/// Opens a regular file for reading. Anything else (FIFO, device, directory, socket) is
/// refused without being opened for long: the kind is checked before the open, the open is
/// non-blocking (a FIFO swapped in meanwhile cannot stall it) and the kind is checked again
/// on the open file.
pub fn open_regular(path: &Path) -> Result<File> {
    regular_metadata(path)?;
    let mut opts = OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(|e| open_error(path, e))?;
    let meta = file.metadata().map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(file_error(
            path,
            FileProblem::NotRegular(kind_name(meta.file_type())),
        ));
    }
    Ok(file)
}

/// Maps a file opened by [`open_regular`] read-only, for the model loaders (safetensors and
/// GGUF). When the file fits in nine tenths of the available memory (which counts the page
/// cache the file may already sit in), every page is mapped now (MAP_POPULATE: the pages
/// stay the file's, no second copy, and the kernel may still reclaim them), so a forward
/// pass never stops on a page fault the first time it touches an expert — llama.cpp's
/// loader populates its mappings too. A file larger than that is mapped lazily: reading it
/// all up front would only evict its own first pages. On Linux the mapping asks for huge
/// pages before its first touch (2 MiB entries where the page cache holds the file in large
/// folios: one TLB entry covers 512 pages of a decode step's scattered expert reads), and is
/// then populated by `MADV_POPULATE_READ`, or by `MAP_POPULATE` on kernels without it.
pub fn map_read_only(file: &File, len: u64) -> std::io::Result<memmap2::Mmap> {
    let available = crate::limits::mem_available_bytes().unwrap_or(0);
    let populate = u128::from(len) * 10 <= u128::from(available) * 9;
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as for `map_with` below.
        let map = unsafe { map_with(file, false) }?;
        // Advice only: a kernel without transparent huge pages refuses it and maps 4 KiB
        // pages, which are correct too.
        let _ = map.advise(memmap2::Advice::HugePage);
        if !populate || map.advise(memmap2::Advice::PopulateRead).is_ok() {
            return Ok(map);
        }
    }
    // SAFETY: as for `map_with` below.
    unsafe { map_with(file, populate) }
}

/// Maps `file` read-only, every page now if `populate`.
///
/// # Safety
/// The file must not be written or truncated while the map lives (see below).
unsafe fn map_with(file: &File, populate: bool) -> std::io::Result<memmap2::Mmap> {
    let mut opts = memmap2::MmapOptions::new();
    if populate {
        opts.populate();
    }
    // SAFETY: mapping a file is unsafe because the bytes behind the `&[u8]` taken from it
    // could change (or the pages vanish, if the file shrinks) when another process writes
    // the file meanwhile, breaking the immutability the borrow promises. The file is
    // opened read-only and never written through the mapping; the one remaining
    // condition — nobody rewrites a model file while it is being read — is the documented
    // precondition of `Checkpoint::open` and `Gguf::open`, the one every mmap-based loader
    // (llama.cpp, safetensors, gguf-py's `np.memmap`) makes. The callers check every byte
    // range they take from the mapping against its length first.
    unsafe { opts.map(file) }
}

/// Reads a whole regular file of at most `limit` bytes; `kind` names it in the error
/// ("JSON document", "vocabulary", ...).
pub fn read_bounded(path: &Path, limit: u64, kind: &'static str) -> Result<Vec<u8>> {
    let file = open_regular(path)?;
    let size = file.metadata().map_err(|e| io_error(path, e))?.len();
    let too_large = |size| file_error(path, FileProblem::TooLarge { size, limit, kind });
    if size > limit {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    // One byte past the limit tells a file that grew (or a /proc file that reports 0).
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Reads a file (a vocabulary, a conversation, ...), naming it in the error; at most
/// [`TEXT_FILE_BYTES`].
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    read_bounded(path, TEXT_FILE_BYTES, "file read whole")
}

/// Reads and parses a JSON file (config.json, an index, ...), naming it in the error; at
/// most [`JSON_FILE_BYTES`].
pub fn read_json(path: &Path) -> Result<serde_json::Value> {
    let bytes = read_bounded(path, JSON_FILE_BYTES, "JSON document")?;
    serde_json::from_slice(&bytes).map_err(|source| Error::Json {
        what: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty directory, removed with its contents when dropped (pass or fail).
    fn tmp(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("anatomy-read-{tag}-"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn reads_refuse_what_is_not_a_regular_file() {
        let dir = tmp("read");
        let d = dir.path();
        let err = read_json(d).unwrap_err().to_string();
        assert!(err.ends_with("is a directory, not a regular file"), "{err}");
        #[cfg(unix)]
        {
            let err = read_json(Path::new("/dev/zero")).unwrap_err().to_string();
            assert!(err.contains("character device"), "{err}");
            let link = d.join("dangling");
            std::os::unix::fs::symlink(d.join("nothing"), &link).unwrap();
            let err = read_file(&link).unwrap_err().to_string();
            assert!(err.contains("does not exist"), "{err}");
            let a = d.join("a");
            std::os::unix::fs::symlink(d.join("b"), &a).unwrap();
            std::os::unix::fs::symlink(&a, d.join("b")).unwrap();
            let err = read_file(&a).unwrap_err().to_string();
            assert!(err.contains("loop"), "{err}");
        }
        let big = d.join("big");
        std::fs::write(&big, vec![b' '; 100]).unwrap();
        let err = read_bounded(&big, 10, "test file").unwrap_err().to_string();
        assert!(err.contains("100 bytes, more than the 10 bytes"), "{err}");
    }

    #[test]
    fn excerpts_are_short() {
        assert_eq!(excerpt("abc"), "\"abc\"");
        let long = "x".repeat(10_000_000);
        let e = excerpt(&long);
        assert!(e.len() < 100 && e.ends_with("(10000000 bytes)"), "{e}");
    }
}
