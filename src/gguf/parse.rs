//! The pure GGUF parser: bytes in, checked header out. Nothing here allocates by a count
//! or length read from the file before checking it against the bytes that are left, so a
//! lying header is an error naming the field, never a huge allocation or a panic.

use super::{GgufTensor, MetaValue};
use crate::error::{CheckpointProblem, Error, Result, excerpt};
use crate::quant::{ALL_TYPES, GgmlType};
use std::collections::HashSet;
use std::path::Path;

/// The file's first four bytes.
pub const MAGIC: &[u8; 4] = b"GGUF";
/// The alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that sets the alignment (a u32, a power of two).
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// ggml's limit on dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// ggml's limit on a tensor name, terminating NUL included (`GGML_MAX_NAME`).
pub const MAX_NAME_BYTES: usize = 64;
/// llama.cpp's limits on one string and one array (`GGUF_MAX_STRING_LENGTH`,
/// `GGUF_MAX_ARRAY_ELEMENTS`).
pub const MAX_STRING_BYTES: u64 = 1 << 30;
pub const MAX_ARRAY_LEN: u64 = 1 << 30;
/// Metadata values (array elements counted one by one) in one file. A parsed value takes
/// 32 bytes whatever its size on disk, so a file of a gigabyte of u8 could otherwise cost
/// 32 GB; the largest vocabularies (~260 000 tokens, with merges, scores and types) need
/// about a million.
pub const MAX_METADATA_VALUES: u64 = 1 << 24;
/// Arrays inside arrays: gguf-py writes them (llama.cpp reads none); real files nest at
/// most once. The bound keeps the recursion shallow.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// Memory the parsed header may take beyond its size on disk. A tiny key costs ~15 bytes
/// on disk and ~90 parsed, so without a bound a header of small entries grows six-fold in
/// memory; the largest real vocabularies parse to about 40 MB.
pub const MEMORY_FLOOR: u64 = 128 << 20;

/// What a heap allocation of `len` bytes costs: rounded to 16 and a 16-byte header, as
/// glibc's malloc; nothing when empty.
fn heap_bytes(len: usize) -> u64 {
    if len == 0 {
        0
    } else {
        (len as u64).div_ceil(16) * 16 + 16
    }
}

/// The values and the memory the parsed header has taken so far: the values counted
/// against [`MAX_METADATA_VALUES`], the memory (estimated as it is allocated) against
/// the bytes read so far plus a floor, so memory stays within about twice the header.
struct Budget {
    values_left: u64,
    bytes: u64,
    floor: u64,
}

impl Budget {
    fn new(floor: u64) -> Budget {
        Budget {
            values_left: MAX_METADATA_VALUES,
            bytes: 0,
            floor,
        }
    }

    /// Whether `n` more values fit, without taking them.
    fn check_values(&self, file: &Path, key: &str, n: u64) -> Result<()> {
        if n > self.values_left {
            return Err(malformed(
                file,
                format!(
                    "{}: more than {MAX_METADATA_VALUES} metadata values in the file",
                    excerpt(key)
                ),
            ));
        }
        Ok(())
    }

    fn count_values(&mut self, file: &Path, key: &str, n: u64) -> Result<()> {
        self.check_values(file, key, n)?;
        self.values_left -= n;
        Ok(())
    }

    /// Takes `bytes` of memory for the entry `what`, before they are allocated.
    fn charge(&mut self, r: &Reader, bytes: u64, what: &str) -> Result<()> {
        self.bytes = self.bytes.saturating_add(bytes);
        let allowed = self.floor + r.pos as u64;
        if self.bytes > allowed {
            return Err(malformed(
                r.file,
                format!(
                    "at {} (offset {}): the header's entries would take more than {allowed} bytes in memory, its {} bytes so far plus {} (too many small keys, values or tensor infos)",
                    excerpt(what),
                    r.pos,
                    r.pos,
                    self.floor
                ),
            ));
        }
        Ok(())
    }
}

/// What [`parse`] finds: everything but the tensor data, which stays in the caller's bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// 2 or 3 (identical layouts for little-endian files).
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    pub tensors: Vec<GgufTensor>,
    pub alignment: u64,
    /// Where the data section starts in the file (tensor offsets are relative to it).
    pub data_offset: u64,
}

/// The metadata value types of the format, by id.
pub(super) mod value_type {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// Bytes one value of the type takes at least (a string its length, an array its element
/// type and count); `None` for an unknown type.
fn min_value_bytes(ty: u32) -> Option<u64> {
    use value_type::*;
    Some(match ty {
        U8 | I8 | BOOL => 1,
        U16 | I16 => 2,
        U32 | I32 | F32 => 4,
        U64 | I64 | F64 | STRING => 8,
        ARRAY => 12,
        _ => return None,
    })
}

/// ggml's name for every type id it has defined (`ggml_type_name`), for messages about the
/// types this crate does not read.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    const NAMES: [&str; 43] = [
        "f32", "f16", "q4_0", "q4_1", "", "", "q5_0", "q5_1", "q8_0", "q8_1", "q2_K", "q3_K",
        "q4_K", "q5_K", "q6_K", "q8_K", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s",
        "iq2_s", "iq4_xs", "i8", "i16", "i32", "i64", "f64", "iq1_m", "bf16", "", "", "", "tq1_0",
        "tq2_0", "", "", "", "mxfp4", "nvfp4", "q1_0", "q2_0",
    ];
    NAMES.get(id as usize).copied().filter(|n| !n.is_empty())
}

fn file_error(file: &Path, problem: CheckpointProblem) -> Error {
    Error::Checkpoint {
        file: file.to_path_buf(),
        tensor: None,
        problem,
    }
}

pub(super) fn malformed(file: &Path, detail: impl Into<String>) -> Error {
    file_error(file, CheckpointProblem::Malformed(detail.into()))
}

/// A problem with one tensor of a file (a long name cut: [`Error::tensor`]).
fn tensor_error(file: &Path, tensor: &str, problem: CheckpointProblem) -> Error {
    Error::tensor(file, tensor, problem)
}

/// A cursor over the file's bytes that reports every short read as truncation, saying
/// what was being read and where.
struct Reader<'a> {
    file: &'a Path,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(file_error(
                self.file,
                CheckpointProblem::Truncated(format!(
                    "{} needs {n} bytes at offset {}, but the file has {} left",
                    what(),
                    self.pos,
                    self.remaining()
                )),
            ));
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let b = self.take(N as u64, what)?;
        Ok(b.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A gguf string, owned.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        self.str(what).map(str::to_string)
    }

    /// A gguf string: a u64 length, then that many bytes of UTF-8.
    fn str(&mut self, what: &dyn Fn() -> String) -> Result<&'a str> {
        let len = self.u64(&|| format!("the length of {}", what()))?;
        if len > MAX_STRING_BYTES {
            return Err(malformed(
                self.file,
                format!(
                    "{}: length {len} is past the format's limit of {MAX_STRING_BYTES} bytes",
                    what()
                ),
            ));
        }
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s),
            Err(e) => Err(malformed(
                self.file,
                format!(
                    "{} is not UTF-8 (byte {} of {len}): {}",
                    what(),
                    e.valid_up_to(),
                    excerpt(&String::from_utf8_lossy(bytes))
                ),
            )),
        }
    }
}

/// Parses and checks a whole GGUF file held in `bytes`; `path_for_errors` names it in
/// errors. Every count, length, shape and offset is checked: the tensors' byte ranges
/// returned lie inside `bytes`, aligned, in order, without overlap.
pub fn parse(path_for_errors: &Path, bytes: &[u8]) -> Result<Parsed> {
    parse_within(path_for_errors, bytes, MEMORY_FLOOR)
}

/// [`parse`] with `floor` bytes of memory allowed beyond the header's size on disk.
fn parse_within(file: &Path, bytes: &[u8], floor: u64) -> Result<Parsed> {
    let mut r = Reader {
        file,
        bytes,
        pos: 0,
    };
    let (version, tensor_count, kv_count) = read_header(&mut r)?;
    let mut budget = Budget::new(floor);
    let metadata = read_metadata(&mut r, kv_count, &mut budget)?;
    let alignment = alignment_of(file, &metadata)?;
    let tensors = read_tensor_infos(&mut r, tensor_count, &mut budget)?;

    // The data section starts at the next multiple of the alignment.
    let header_end = r.pos as u64;
    let data_offset = header_end.div_ceil(alignment) * alignment;
    let file_len = bytes.len() as u64;
    if !tensors.is_empty() && data_offset > file_len {
        return Err(file_error(
            file,
            CheckpointProblem::Truncated(format!(
                "the data section starts at offset {data_offset} (the header padded to {alignment}), past the end of the file at {file_len}"
            )),
        ));
    }
    let data_len = file_len.saturating_sub(data_offset);
    check_layout(file, &tensors, alignment, data_len)?;
    Ok(Parsed {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// The magic, the version and the two counts: (version, tensor count, metadata count),
/// each count refused when the rest of the file cannot hold that many entries.
fn read_header(r: &mut Reader) -> Result<(u32, u64, u64)> {
    let file = r.file;
    let magic: [u8; 4] = r.array(&|| "the magic \"GGUF\"".to_string())?;
    if &magic != MAGIC {
        return Err(malformed(
            file,
            format!(
                "not a GGUF file: it starts with {:02x?}, not \"GGUF\"",
                &magic
            ),
        ));
    }
    let version = r.u32(&|| "the version".to_string())?;
    check_version(file, version)?;
    let tensor_count = r.u64(&|| "the tensor count".to_string())?;
    let kv_count = r.u64(&|| "the metadata count".to_string())?;
    // A metadata pair takes at least 14 bytes (a key length, a key byte, a value type and
    // a one-byte value), a tensor info 24: a count past what the rest of the file can hold
    // is refused before it sizes anything.
    let bound = |count: u64, min: u64, what: &str| -> Result<()> {
        let fits = r.remaining() / min;
        if count > fits {
            return Err(file_error(
                file,
                CheckpointProblem::Truncated(format!(
                    "{what} {count}: the {} bytes after the header hold at most {fits}",
                    r.remaining()
                )),
            ));
        }
        Ok(())
    };
    bound(kv_count, 14, "metadata count")?;
    bound(tensor_count, 24, "tensor count")?;
    Ok((version, tensor_count, kv_count))
}

/// The metadata pairs, each key once.
fn read_metadata<'a>(
    r: &mut Reader<'a>,
    kv_count: u64,
    budget: &mut Budget,
) -> Result<Vec<(String, MetaValue)>> {
    let file = r.file;
    // Grown as pairs are read (and charged), not sized by the count the file claims.
    let mut metadata: Vec<(String, MetaValue)> = Vec::with_capacity(kv_count.min(1024) as usize);
    let mut keys: HashSet<&'a str> = HashSet::new();
    for i in 0..kv_count {
        let key = r.str(&|| format!("the key of metadata pair {i}"))?;
        if key.is_empty() {
            return Err(malformed(
                file,
                format!("metadata pair {i} has an empty key"),
            ));
        }
        if !keys.insert(key) {
            return Err(malformed(
                file,
                format!("metadata key {} appears twice", excerpt(key)),
            ));
        }
        let pair = size_of::<(String, MetaValue)>() + size_of::<&str>() + 8;
        budget.charge(r, pair as u64 + heap_bytes(key.len()), key)?;
        let ty = r.u32(&|| format!("the value type of {}", excerpt(key)))?;
        let value = read_value(r, key, ty, 0, budget)?;
        metadata.push((key.to_string(), value));
    }
    Ok(metadata)
}

/// `general.alignment`, a power of two (32 when absent).
fn alignment_of(file: &Path, metadata: &[(String, MetaValue)]) -> Result<u64> {
    match metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
        None => Ok(DEFAULT_ALIGNMENT),
        Some((_, MetaValue::U32(a))) if a.is_power_of_two() => Ok(u64::from(*a)),
        Some((_, MetaValue::U32(a))) => Err(malformed(
            file,
            format!("`{ALIGNMENT_KEY}` is {a}, not a power of two"),
        )),
        Some((_, v)) => Err(malformed(
            file,
            format!("`{ALIGNMENT_KEY}` must be a u32, not {}", v.type_name()),
        )),
    }
}

/// The tensor infos, each name once.
fn read_tensor_infos(
    r: &mut Reader,
    tensor_count: u64,
    budget: &mut Budget,
) -> Result<Vec<GgufTensor>> {
    let file = r.file;
    let mut tensors: Vec<GgufTensor> = Vec::with_capacity(tensor_count.min(1024) as usize);
    let mut names: HashSet<String> = HashSet::new();
    for i in 0..tensor_count {
        let t = read_tensor_info(r, i)?;
        let info = size_of::<GgufTensor>() + size_of::<String>() + 8;
        let heap = 2 * heap_bytes(t.name.len()) + heap_bytes(8 * t.dims.len());
        budget.charge(r, info as u64 + heap, &t.name)?;
        if !names.insert(t.name.clone()) {
            return Err(tensor_error(
                file,
                &t.name,
                CheckpointProblem::Duplicate {
                    first: file.to_path_buf(),
                },
            ));
        }
        tensors.push(t);
    }
    Ok(tensors)
}

fn check_version(file: &Path, version: u32) -> Result<()> {
    let problem = match version {
        2 | 3 => return Ok(()),
        0 => "version 0 is not a GGUF version".to_string(),
        1 => "GGUF version 1 is not supported (32-bit counts; llama.cpp dropped it too): convert the model again".to_string(),
        v if v & 0xFFFF == 0 => format!(
            "version {v} (0x{v:08x}) looks byte-swapped: a big-endian file? Only little-endian GGUF files are read"
        ),
        v => format!("version {v} is newer than the versions read (2 and 3)"),
    };
    Err(malformed(file, problem))
}

/// One metadata value of type `ty` (for `key`, at array depth `depth`), each value taken
/// from `budget`.
fn read_value(
    r: &mut Reader,
    key: &str,
    ty: u32,
    depth: usize,
    budget: &mut Budget,
) -> Result<MetaValue> {
    use value_type::*;
    budget.count_values(r.file, key, 1)?;
    let what = || format!("the value of {}", excerpt(key));
    Ok(match ty {
        U8 => MetaValue::U8(r.array::<1>(&what)?[0]),
        I8 => MetaValue::I8(i8::from_le_bytes(r.array(&what)?)),
        U16 => MetaValue::U16(u16::from_le_bytes(r.array(&what)?)),
        I16 => MetaValue::I16(i16::from_le_bytes(r.array(&what)?)),
        U32 => MetaValue::U32(u32::from_le_bytes(r.array(&what)?)),
        I32 => MetaValue::I32(i32::from_le_bytes(r.array(&what)?)),
        F32 => MetaValue::F32(f32::from_le_bytes(r.array(&what)?)),
        U64 => MetaValue::U64(u64::from_le_bytes(r.array(&what)?)),
        I64 => MetaValue::I64(i64::from_le_bytes(r.array(&what)?)),
        F64 => MetaValue::F64(f64::from_le_bytes(r.array(&what)?)),
        BOOL => match r.array::<1>(&what)?[0] {
            0 => MetaValue::Bool(false),
            1 => MetaValue::Bool(true),
            b => {
                return Err(malformed(
                    r.file,
                    format!("{}: a bool of byte {b}, not 0 or 1", excerpt(key)),
                ));
            }
        },
        STRING => {
            let s = r.string(&what)?;
            budget.charge(r, heap_bytes(s.len()), key)?;
            MetaValue::Str(s)
        }
        ARRAY => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(malformed(
                    r.file,
                    format!(
                        "{}: arrays nested more than {MAX_ARRAY_DEPTH} deep",
                        excerpt(key)
                    ),
                ));
            }
            let elem = r.u32(&|| format!("the element type of {}", excerpt(key)))?;
            let n = r.u64(&|| format!("the length of {}", excerpt(key)))?;
            let Some(min) = min_value_bytes(elem) else {
                return Err(unknown_type(r.file, key, elem, " of array elements"));
            };
            if n > MAX_ARRAY_LEN {
                return Err(malformed(
                    r.file,
                    format!(
                        "{}: an array of {n} elements, past the format's limit of {MAX_ARRAY_LEN}",
                        excerpt(key)
                    ),
                ));
            }
            let fits = r.remaining() / min;
            if n > fits {
                return Err(file_error(
                    r.file,
                    CheckpointProblem::Truncated(format!(
                        "{}: an array of {n} elements, but the {} bytes left hold at most {fits}",
                        excerpt(key),
                        r.remaining()
                    )),
                ));
            }
            budget.check_values(r.file, key, n)?;
            budget.charge(r, n * size_of::<MetaValue>() as u64, key)?;
            let mut items = Vec::with_capacity(n as usize);
            for _ in 0..n {
                items.push(read_value(r, key, elem, depth + 1, budget)?);
            }
            MetaValue::Array(items)
        }
        other => return Err(unknown_type(r.file, key, other, "")),
    })
}

fn unknown_type(file: &Path, key: &str, ty: u32, of: &str) -> Error {
    malformed(
        file,
        format!(
            "{}: unknown metadata value type {ty}{of} (the format has 0 to 12)",
            excerpt(key)
        ),
    )
}

/// One tensor info: name, dimensions, type and offset; its size from the type's blocks.
fn read_tensor_info(r: &mut Reader, i: u64) -> Result<GgufTensor> {
    let file = r.file;
    let name = r.string(&|| format!("the name of tensor {i}"))?;
    let bad = |detail: String| tensor_error(file, &name, CheckpointProblem::Malformed(detail));
    if name.is_empty() {
        return Err(malformed(file, format!("tensor {i} has an empty name")));
    }
    if name.len() >= MAX_NAME_BYTES {
        return Err(bad(format!(
            "a name of {} bytes; ggml's limit is {} (GGML_MAX_NAME)",
            name.len(),
            MAX_NAME_BYTES - 1
        )));
    }
    let what = |field: &'static str| {
        let name = name.clone();
        move || format!("the {field} of tensor `{name}`")
    };
    let n_dims = r.u32(&what("number of dimensions"))?;
    if n_dims as usize > MAX_DIMS {
        return Err(bad(format!(
            "{n_dims} dimensions; ggml tensors have at most {MAX_DIMS}"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        let d = r.u64(&what("dimensions"))?;
        // ggml holds dimensions in an i64.
        if d > i64::MAX as u64 {
            return Err(bad(format!("dimension {d} is past 2^63 - 1")));
        }
        dims.push(d);
    }
    // The product of the non-zero dimensions too, so no product of some of them (rows,
    // a matrix of a stacked tensor) wraps even when another dimension is 0.
    let nonzero = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d.max(1)));
    if nonzero.is_none_or(|n| n > i64::MAX as u64) {
        return Err(bad(format!(
            "dimensions {dims:?}: more than 2^63 - 1 elements"
        )));
    }
    let elements: u64 = dims.iter().product();
    let type_id = r.u32(&what("type"))?;
    let offset = r.u64(&what("offset"))?;
    let Some(ty) = GgmlType::from_id(type_id) else {
        let found = match ggml_type_name(type_id) {
            Some(n) => format!("{type_id} ({n})"),
            None => format!("{type_id} (not a ggml type)"),
        };
        let supported = ALL_TYPES.map(|t| t.name()).join(", ");
        return Err(tensor_error(
            file,
            &name,
            CheckpointProblem::UnsupportedType { found, supported },
        ));
    };
    let ne0 = dims.first().copied().unwrap_or(1);
    let rows = elements.checked_div(ne0).unwrap_or(0);
    let row = ty.row_bytes(ne0).ok_or_else(|| {
        bad(format!(
            "{ne0} elements per row, not a whole number of {} blocks of {}",
            ty.name(),
            ty.block_size()
        ))
    })?;
    let size = row
        .checked_mul(rows)
        .ok_or_else(|| bad(format!("{} {dims:?} is more than 2^64 bytes", ty.name())))?;
    Ok(GgufTensor {
        name,
        dims,
        ty,
        offset,
        size,
    })
}

/// Tensors lie one after another in the data section, each at the end of the one before
/// rounded up to the alignment (the layout llama.cpp writes and the only one it loads):
/// so none is misaligned, none overlaps another, and all lie inside the file.
fn check_layout(file: &Path, tensors: &[GgufTensor], alignment: u64, data_len: u64) -> Result<()> {
    let mut expected = 0u64;
    let mut previous: Option<&str> = None;
    for t in tensors {
        let bad = |problem| tensor_error(file, &t.name, problem);
        if !t.offset.is_multiple_of(alignment) {
            return Err(bad(CheckpointProblem::Malformed(format!(
                "offset {} is not a multiple of the alignment {alignment}",
                t.offset
            ))));
        }
        if t.offset < expected {
            let prev = previous.unwrap_or_default().to_string();
            return Err(bad(CheckpointProblem::Overlap(prev)));
        }
        if t.offset > expected {
            return Err(bad(CheckpointProblem::Malformed(format!(
                "offset {} leaves a gap: the tensor before ends at {expected} (padded)",
                t.offset
            ))));
        }
        let end = t.offset.checked_add(t.size).filter(|&e| e <= data_len);
        let Some(end) = end else {
            return Err(bad(CheckpointProblem::Truncated(format!(
                "{} bytes at offset {} of the data section, which has {data_len}",
                t.size, t.offset
            ))));
        };
        // `end` ≤ the file's length, so rounding up cannot wrap.
        expected = end.div_ceil(alignment) * alignment;
        previous = Some(&t.name);
    }
    Ok(())
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    /// A GGUF of `n` one-byte metadata values under short keys, or of `n` empty tensors.
    fn tiny_entries(n: u64, tensors: bool) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        let (t, kv) = if tensors { (n, 0u64) } else { (0, n) };
        b.extend(t.to_le_bytes());
        b.extend(kv.to_le_bytes());
        for i in 0..n {
            let key = format!("k{i:x}");
            b.extend((key.len() as u64).to_le_bytes());
            b.extend(key.as_bytes());
            if tensors {
                b.extend(1u32.to_le_bytes()); // one dimension, of 0 elements, f32, at 0
                b.extend(0u64.to_le_bytes());
                b.extend(0u32.to_le_bytes());
                b.extend(0u64.to_le_bytes());
            } else {
                b.extend(value_type::U8.to_le_bytes());
                b.push(1);
            }
        }
        b
    }

    #[test]
    fn small_entries_are_charged_to_the_memory_budget() {
        for tensors in [false, true] {
            let bytes = tiny_entries(20_000, tensors);
            let file = Path::new("tiny.gguf");
            // Parsed, 20 000 entries take more than 64 KiB beyond the file's own bytes.
            let err = parse_within(file, &bytes, 64 << 10)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("tiny.gguf") && err.contains("in memory"),
                "{err}"
            );
            // Within the real floor the metadata parses; the tensors then fail only
            // because their data section would start past the end of the file.
            let parsed = parse(file, &bytes);
            assert_eq!(parsed.is_ok(), !tensors, "{parsed:?}");
        }
    }
}
