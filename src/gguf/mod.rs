//! Chapters 9 and 11: llama.cpp's GGUF files, read (memory-mapped, every field checked)
//! and written (byte for byte as gguf-py's `GGUFWriter` writes them).
//!
//! A GGUF file is, little-endian throughout:
//!
//! | field | bytes |
//! |---|---|
//! | magic `"GGUF"` | 4 |
//! | version (3; 2 has the same layout, 1 is refused) | u32 |
//! | tensor count, metadata count | u64, u64 |
//! | metadata pairs: a key (a *gguf string*: u64 length + UTF-8 bytes), a u32 value type, the value | … |
//! | tensor infos: name (gguf string), u32 `n_dims` ≤ 4, `n_dims` × u64 `ne` (ggml order: `ne[0]` is the contiguous axis), u32 ggml type, u64 offset in the data section | … |
//! | zero padding to `general.alignment` (a u32 power of two; 32 when absent) | … |
//! | the data section: each tensor at its offset, padded to the alignment | … |
//!
//! Value types are 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
//! 9 array (a u32 element type, a u64 count, the elements), 10 u64, 11 i64, 12 f64.
//! A tensor's size follows from its type's blocks ([`GgmlType::row_bytes`]).
//!
//! The reader ([`parse()`]) checks what llama.cpp's `gguf_init_from_file` checks — the
//! version, unique non-empty keys, a power-of-two alignment, at most 4 dimensions, element
//! counts within `i64`, rows a whole number of blocks, unique tensor names under 64 bytes,
//! each tensor at the end of the one before rounded up to the alignment — and, beyond it,
//! that strings are UTF-8, bools are 0 or 1, nested arrays at most
//! [`MAX_ARRAY_DEPTH`] deep and every tensor inside the file. Every count and
//! length is checked against the bytes left before it sizes anything. Tensors of a type
//! this crate does not read (IQ*, Q2_K, Q3_K, ...) are refused by name.

mod parse;
#[cfg(test)]
mod tests;
mod writer;

pub use parse::{
    ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS, MAX_METADATA_VALUES, Parsed,
    ggml_type_name, parse,
};
pub use writer::GgufWriter;

use crate::error::{CheckpointProblem, Error, Result, excerpt};
use crate::quant::GgmlType;
use memmap2::Mmap;
use std::path::{Path, PathBuf};

/// One metadata value. Arrays hold values of one type (arrays of arrays may differ inside).
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<MetaValue>),
}

impl MetaValue {
    /// Any integer that is non-negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A float, or an integer as a float.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The format's name of the value's type (gguf-py's `GGUFValueType` names).
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "UINT8",
            MetaValue::I8(_) => "INT8",
            MetaValue::U16(_) => "UINT16",
            MetaValue::I16(_) => "INT16",
            MetaValue::U32(_) => "UINT32",
            MetaValue::I32(_) => "INT32",
            MetaValue::U64(_) => "UINT64",
            MetaValue::I64(_) => "INT64",
            MetaValue::F32(_) => "FLOAT32",
            MetaValue::F64(_) => "FLOAT64",
            MetaValue::Bool(_) => "BOOL",
            MetaValue::Str(_) => "STRING",
            MetaValue::Array(_) => "ARRAY",
        }
    }

    /// The format's id of the value's type.
    pub fn type_id(&self) -> u32 {
        use parse::value_type::*;
        match self {
            MetaValue::U8(_) => U8,
            MetaValue::I8(_) => I8,
            MetaValue::U16(_) => U16,
            MetaValue::I16(_) => I16,
            MetaValue::U32(_) => U32,
            MetaValue::I32(_) => I32,
            MetaValue::U64(_) => U64,
            MetaValue::I64(_) => I64,
            MetaValue::F32(_) => F32,
            MetaValue::F64(_) => F64,
            MetaValue::Bool(_) => BOOL,
            MetaValue::Str(_) => STRING,
            MetaValue::Array(_) => ARRAY,
        }
    }
}

/// One tensor info, checked: `offset + size` lies inside the data section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensor {
    pub name: String,
    /// ggml order: `dims[0]` = `ne0`, the contiguous (column) axis.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Relative to the data section.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
}

impl GgufTensor {
    /// Row-major, outermost first: `dims` reversed (an `nn.Linear` `[out, in]` has dims
    /// `[in, out]`). Dimensions were checked to multiply within `i64` when read.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// Elements (the product of the dimensions).
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// An opened GGUF file: its checked header and its memory-mapped bytes.
pub struct Gguf {
    path: PathBuf,
    map: Mmap,
    parsed: Parsed,
}

impl std::fmt::Debug for Gguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gguf")
            .field("path", &self.path)
            .field("version", &self.parsed.version)
            .field("metadata", &self.parsed.metadata.len())
            .field("tensors", &self.parsed.tensors.len())
            .finish()
    }
}

impl Gguf {
    /// Opens and checks a GGUF file. Only a regular file is opened (a FIFO, device or
    /// directory is refused by kind); it is memory-mapped, and must not be modified while
    /// the `Gguf` is alive (see the safety note of [`crate::error::map_read_only`]).
    pub fn open(path: &Path) -> Result<Gguf> {
        let file = crate::error::open_regular(path)?;
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let len = file.metadata().map_err(io)?.len();
        if len < 24 {
            return Err(Error::Checkpoint {
                file: path.to_path_buf(),
                tensor: None,
                problem: CheckpointProblem::Truncated(format!(
                    "{len} bytes: too short for a GGUF file (its header alone is 24)"
                )),
            });
        }
        let map = crate::error::map_read_only(&file, len).map_err(io)?;
        let parsed = parse(path, &map)?;
        Ok(Gguf {
            path: path.to_path_buf(),
            map,
            parsed,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.parsed.version
    }

    /// Every metadata pair, in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.parsed.metadata
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.parsed
            .metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Every tensor, in file order.
    pub fn tensors(&self) -> &[GgufTensor] {
        &self.parsed.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.parsed.tensors.iter().find(|t| t.name == name)
    }

    /// The bytes of a tensor of this file: exactly `t.size` of them.
    ///
    /// # Panics
    /// If `t` is not one of this file's tensors (its range lies outside the file).
    pub fn data(&self, t: &GgufTensor) -> &[u8] {
        let range = t
            .offset
            .checked_add(self.parsed.data_offset)
            .and_then(|start| Some(start..start.checked_add(t.size)?))
            .filter(|r| r.end <= self.map.len() as u64);
        match range {
            Some(r) => &self.map[r.start as usize..r.end as usize],
            None => panic!(
                "tensor `{}` is not a tensor of {}",
                t.name,
                self.path.display()
            ),
        }
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> u64 {
        self.parsed.data_offset
    }

    pub fn alignment(&self) -> u64 {
        self.parsed.alignment
    }

    pub fn file_size(&self) -> u64 {
        self.map.len() as u64
    }

    fn key_error(&self, key: &str, problem: String) -> Error {
        Error::Checkpoint {
            file: self.path.clone(),
            tensor: None,
            problem: CheckpointProblem::Malformed(format!("metadata `{key}`: {problem}")),
        }
    }

    fn typed<T>(
        &self,
        key: &str,
        want: &str,
        get: impl Fn(&MetaValue) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => get(v).map(Some).ok_or_else(|| {
                self.key_error(
                    key,
                    format!("{} {}, expected {want}", v.type_name(), brief(v)),
                )
            }),
        }
    }

    /// A non-negative integer of any width, if the key is present.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "a non-negative integer", MetaValue::as_u64)
    }

    /// A float or an integer, if the key is present.
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        self.typed(key, "a number", MetaValue::as_f64)
    }

    /// A string, if the key is present.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Str(s)) => Ok(Some(s)),
            Some(v) => Err(self.key_error(
                key,
                format!("{} {}, expected a string", v.type_name(), brief(v)),
            )),
        }
    }

    pub fn require_u64(&self, key: &str) -> Result<u64> {
        self.get_u64(key)?
            .ok_or_else(|| self.key_error(key, "missing".to_string()))
    }

    pub fn require_str(&self, key: &str) -> Result<&str> {
        self.get_str(key)?
            .ok_or_else(|| self.key_error(key, "missing".to_string()))
    }
}

/// A value as an error message quotes it: short.
fn brief(v: &MetaValue) -> String {
    match v {
        MetaValue::Str(s) => excerpt(s),
        MetaValue::Array(a) => format!("of {} elements", a.len()),
        MetaValue::F32(x) => x.to_string(),
        MetaValue::F64(x) => x.to_string(),
        MetaValue::Bool(b) => b.to_string(),
        other => other
            .as_u64()
            .map(|u| u.to_string())
            .or_else(|| other.as_f64().map(|f| f.to_string()))
            .unwrap_or_default(),
    }
}
