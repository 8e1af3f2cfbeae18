//! Hugging Face checkpoints on disk: memory-mapped safetensors files, a single
//! `model.safetensors` or shards listed in `model.safetensors.index.json`. Chapter 9 loads
//! the model through it (source S0 5.5); chapter 4's glitch screen reads embeddings with it.
//!
//! A safetensors file is an 8-byte little-endian header length `N`, `N` bytes of JSON
//! mapping each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets
//! relative to the end of the header), then the raw little-endian data. We parse and check
//! the header ourselves — length inside the file, JSON, every offset inside the data
//! section, `end − begin = Π shape · dtype size`, no two tensors overlapping — so a truncated
//! or lying file is an error naming the file and tensor, never a panic or an out-of-bounds
//! read. Weights are handed out as [`Matrix`] views in their stored dtype (F32, BF16, F16):
//! nothing is widened to f32 wholesale; the kernels widen row by row.

mod dtype;
mod index;
mod strict;

pub use dtype::Dtype;
pub use index::parse_index;
use index::read_index;

use crate::error::{CheckpointProblem, Error, Result};
use crate::kernels::{Matrix, WeightData};
use half::{bf16, f16};
use memmap2::Mmap;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What the header says about one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
}

/// One memory-mapped safetensors file.
struct Shard {
    path: PathBuf,
    map: Mmap,
}

/// A copy of a tensor whose bytes are not aligned for its element type in the file (or
/// whose host is big-endian); made on first use and kept for the checkpoint's lifetime.
enum Owned {
    F32(Vec<f32>),
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
}

struct Entry {
    shard: usize,
    info: TensorInfo,
    /// Absolute byte range inside the shard's mapping (already checked to lie inside it).
    start: usize,
    end: usize,
    copy: OnceLock<Owned>,
}

/// An opened checkpoint: every tensor of every shard, by name.
pub struct Checkpoint {
    dir: PathBuf,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, Entry>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("dir", &self.dir)
            .field("shards", &self.shards.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// A problem with the whole file (or directory), not one tensor.
fn file_error(file: &Path, problem: CheckpointProblem) -> Error {
    Error::Checkpoint {
        file: file.to_path_buf(),
        tensor: None,
        problem,
    }
}

/// A problem with one tensor of a file (a long name cut: [`Error::tensor`]).
fn tensor_error(file: &Path, tensor: &str, problem: CheckpointProblem) -> Error {
    Error::tensor(file, tensor, problem)
}

fn malformed(file: &Path, detail: impl Into<String>) -> Error {
    file_error(file, CheckpointProblem::Malformed(detail.into()))
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Checkpoint {
    /// Opens the safetensors of a model directory: `model.safetensors`, or the shards named
    /// by `model.safetensors.index.json`, or else every `*.safetensors` file in it.
    ///
    /// The files are memory-mapped: they must not be modified while the checkpoint is open
    /// (see the safety note in [`Checkpoint::open_file`]).
    pub fn open(dir: &Path) -> Result<Checkpoint> {
        Self::open_with_progress(dir, |_, _, _| {})
    }

    /// [`Checkpoint::open`], calling `progress(i, n, file)` after each of the `n` files.
    pub fn open_with_progress(
        dir: &Path,
        mut progress: impl FnMut(usize, usize, &Path),
    ) -> Result<Checkpoint> {
        let meta = std::fs::metadata(dir).map_err(|e| io(dir, e))?;
        if !meta.is_dir() {
            return Err(file_error(dir, CheckpointProblem::NotADirectory));
        }
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        // A name that is there in any form (a directory, a dangling link) is the file
        // meant, and opening it says what is wrong with it.
        let present = |p: &Path| std::fs::symlink_metadata(p).is_ok();
        let (files, weight_map) = if present(&single) {
            (vec![single], None)
        } else if present(&index) {
            let (files, map) = read_index(&index)?;
            (files, Some(map))
        } else {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| io(dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(file_error(dir, CheckpointProblem::NoWeights));
            }
            (files, None)
        };
        let mut ckpt = Checkpoint {
            dir: dir.to_path_buf(),
            shards: Vec::with_capacity(files.len()),
            tensors: BTreeMap::new(),
        };
        let n = files.len();
        for (i, file) in files.iter().enumerate() {
            ckpt.add_file(file)?;
            progress(i + 1, n, file);
        }
        if let Some(map) = weight_map {
            // Every tensor the index promises must be in the shard it names.
            for (name, file) in &map {
                match ckpt.tensors.get(name) {
                    Some(e) if ckpt.shards[e.shard].path == *file => {}
                    Some(e) => {
                        return Err(tensor_error(
                            &index,
                            name,
                            CheckpointProblem::Misplaced {
                                listed: file.clone(),
                                found: ckpt.shards[e.shard].path.clone(),
                            },
                        ));
                    }
                    None => {
                        return Err(tensor_error(
                            &index,
                            name,
                            CheckpointProblem::MissingFromShard(file.clone()),
                        ));
                    }
                }
            }
        }
        Ok(ckpt)
    }

    /// Opens one safetensors file.
    pub fn open_file(path: &Path) -> Result<Checkpoint> {
        let mut ckpt = Checkpoint {
            dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            shards: Vec::new(),
            tensors: BTreeMap::new(),
        };
        ckpt.add_file(path)?;
        Ok(ckpt)
    }

    fn add_file(&mut self, path: &Path) -> Result<()> {
        // A regular file only: a FIFO, device or directory is refused by name.
        let file = crate::error::open_regular(path)?;
        let len = file.metadata().map_err(|e| io(path, e))?.len();
        if len < 8 {
            return Err(too_short(path, len));
        }
        let map = crate::error::map_read_only(&file, len).map_err(|e| io(path, e))?;
        let shard = self.shards.len();
        let entries = parse_header(path, &map)?;
        for (name, info, start, end) in entries {
            if let Some(prev) = self.tensors.get(&name) {
                return Err(tensor_error(
                    path,
                    &name,
                    CheckpointProblem::Duplicate {
                        first: self.shards[prev.shard].path.clone(),
                    },
                ));
            }
            self.tensors.insert(
                name,
                Entry {
                    shard,
                    info,
                    start,
                    end,
                    copy: OnceLock::new(),
                },
            );
        }
        self.shards.push(Shard {
            path: path.to_path_buf(),
            map,
        });
        Ok(())
    }
}

fn too_short(path: &Path, len: u64) -> Error {
    file_error(
        path,
        CheckpointProblem::Truncated(format!(
            "{len} bytes: too short for a safetensors file (an 8-byte header length comes first)"
        )),
    )
}

/// The most dimensions a tensor may have (PyTorch's limit).
const MAX_RANK: usize = 64;

/// One tensor of a safetensors header, in file order: its name, dtype and shape, and the
/// byte range of its data in the whole file.
pub type HeaderEntry = (String, TensorInfo, usize, usize);

/// Parses and checks a safetensors file held in `bytes` (the whole file; `path` names it
/// in errors). Returns each tensor with its absolute byte range inside `bytes`.
pub fn parse_header(path: &Path, bytes: &[u8]) -> Result<Vec<HeaderEntry>> {
    let (obj, data_start) = header_json(path, bytes)?;
    let data_len = bytes.len() - data_start;
    let mut out = Vec::with_capacity(obj.len());
    for (name, v) in &obj {
        if name == "__metadata__" {
            continue;
        }
        let (info, begin, end) = tensor_entry(path, name, v, data_len)?;
        out.push((name.clone(), info, data_start + begin, data_start + end));
    }
    check_no_overlap(path, &out)?;
    Ok(out)
}

/// The header's length checked against the format's limit and the file, and its JSON
/// object read with every key kept (a name given twice is refused): the entries and
/// where the data section starts.
fn header_json(path: &Path, bytes: &[u8]) -> Result<(Vec<(String, Value)>, usize)> {
    let Some((len8, rest)) = bytes.split_first_chunk::<8>() else {
        return Err(too_short(path, bytes.len() as u64));
    };
    let n = u64::from_le_bytes(*len8);
    let available = rest.len() as u64;
    if n > crate::limits::SAFETENSORS_HEADER_BYTES {
        return Err(malformed(
            path,
            format!(
                "header length {n} is past the format's limit of {} bytes",
                crate::limits::SAFETENSORS_HEADER_BYTES
            ),
        ));
    }
    if n > available {
        return Err(file_error(
            path,
            CheckpointProblem::Truncated(format!(
                "header length {n} is larger than the {available} bytes after it"
            )),
        ));
    }
    let data_start = 8 + n as usize;
    // In file order, every key kept: serde_json's map would keep the last of two equal
    // names silently, and a name given twice is invalid in the format.
    let strict::Entries(entries) = serde_json::from_slice(&bytes[8..data_start])
        .map_err(|e| malformed(path, format!("header is not valid JSON: {e}")))?;
    let obj = entries.ok_or_else(|| malformed(path, "header is not a JSON object"))?;
    if let Some(name) = strict::first_repeat(&obj) {
        let first = path.to_path_buf();
        return Err(tensor_error(
            path,
            name,
            CheckpointProblem::Duplicate { first },
        ));
    }
    Ok((obj, data_start))
}

/// One tensor's dtype, shape and data offsets (relative to the data section of
/// `data_len` bytes), checked against each other.
fn tensor_entry(
    path: &Path,
    name: &str,
    v: &Value,
    data_len: usize,
) -> Result<(TensorInfo, usize, usize)> {
    let bad = |problem: String| tensor_error(path, name, CheckpointProblem::Malformed(problem));
    let dtype_str = v
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no `dtype` string".into()))?;
    let dtype = Dtype::parse(dtype_str).ok_or_else(|| {
        bad(format!(
            "unknown dtype {}",
            crate::error::excerpt(dtype_str)
        ))
    })?;
    let dims = v
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no `shape` list".into()))?;
    if dims.len() > MAX_RANK {
        return Err(bad(format!(
            "`shape` has {} dimensions; at most {MAX_RANK} are supported (as in PyTorch)",
            dims.len()
        )));
    }
    let shape = dims
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| bad("`shape` must hold non-negative integers".into()))?;
    let offsets = v
        .get("data_offsets")
        .and_then(Value::as_array)
        .filter(|a| a.len() == 2)
        .and_then(|a| Some((a[0].as_u64()?, a[1].as_u64()?)))
        .ok_or_else(|| bad("`data_offsets` must be [begin, end]".into()))?;
    // ANCHOR: data_offsets
    let (begin, end) = offsets;
    if begin > end || end > data_len as u64 {
        return Err(tensor_error(
            path,
            name,
            CheckpointProblem::Truncated(format!(
                "data_offsets [{begin}, {end}] lie outside the data section of {data_len} bytes"
            )),
        ));
    }
    let expected = shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
    if (end - begin) as usize != expected {
        return Err(bad(format!(
            "data_offsets [{begin}, {end}] hold {} bytes, but {dtype} {shape:?} needs {expected}",
            end - begin
        )));
    }
    // ANCHOR_END: data_offsets
    Ok((TensorInfo { dtype, shape }, begin as usize, end as usize))
}

/// No two tensors may share bytes (a lying header could alias them).
fn check_no_overlap(path: &Path, out: &[HeaderEntry]) -> Result<()> {
    let mut ranges: Vec<(usize, usize, &str)> = out
        .iter()
        .filter(|t| t.3 > t.2)
        .map(|t| (t.2, t.3, t.0.as_str()))
        .collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(tensor_error(
                path,
                w[0].2,
                CheckpointProblem::Overlap(w[1].2.to_string()),
            ));
        }
    }
    Ok(())
}

impl Checkpoint {
    /// The directory the checkpoint was opened from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The safetensors files, in the order they were opened.
    pub fn files(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Total bytes of tensor data.
    pub fn data_bytes(&self) -> usize {
        self.tensors.values().map(|e| e.end - e.start).sum()
    }

    /// The dtype and shape of a tensor.
    pub fn info(&self, name: &str) -> Result<TensorInfo> {
        Ok(self.entry(name)?.info.clone())
    }

    /// The file that holds a tensor.
    pub fn file_of(&self, name: &str) -> Result<&Path> {
        Ok(&self.shards[self.entry(name)?.shard].path)
    }

    fn entry(&self, name: &str) -> Result<&Entry> {
        self.tensors
            .get(name)
            .ok_or_else(|| tensor_error(&self.dir, name, CheckpointProblem::Missing))
    }

    fn bad(&self, e: &Entry, name: &str, problem: CheckpointProblem) -> Error {
        tensor_error(&self.shards[e.shard].path, name, problem)
    }

    fn wrong_shape(&self, e: &Entry, name: &str, expected: &[usize]) -> Error {
        let problem = CheckpointProblem::Shape {
            found: e.info.shape.clone(),
            expected: expected.to_vec(),
        };
        self.bad(e, name, problem)
    }

    /// A 2-D weight `[rows, cols]` in its stored dtype (F32, BF16 or F16).
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix<'_>> {
        self.tensor(name, &[rows, cols])
    }

    /// A tensor of exactly `shape`, viewed as a matrix whose columns are the last dimension
    /// and whose rows are all the others (a 1-D tensor is one row). Fused expert tensors
    /// `[E, R, C]` come back as `[E·R, C]`; cut them with [`row_block`].
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<Matrix<'_>> {
        let e = self.entry(name)?;
        if e.info.shape != shape {
            return Err(self.wrong_shape(e, name, shape));
        }
        let cols = shape.last().copied().unwrap_or(1);
        let rows = shape[..shape.len().saturating_sub(1)].iter().product();
        let data = self.weight_data(e, name)?;
        Ok(Matrix { data, rows, cols })
    }

    /// A tensor widened to f32 (for small ones: norms, biases, tests), with its shape.
    pub fn to_f32(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>)> {
        let e = self.entry(name)?;
        let bytes = self.bytes(e);
        let v: Vec<f32> = match e.info.dtype {
            Dtype::F64 => bytes
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32)
                .collect(),
            _ => match self.weight_data(e, name)? {
                WeightData::F32(d) => d.to_vec(),
                WeightData::Bf16(d) => d.iter().map(|x| x.to_f32()).collect(),
                WeightData::F16(d) => d.iter().map(|x| x.to_f32()).collect(),
                WeightData::Quant { .. } => unreachable!("safetensors holds no block formats"),
            },
        };
        Ok((v, e.info.shape.clone()))
    }

    /// A 1-D tensor of length `len` widened to f32 (norm weights, biases).
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let e = self.entry(name)?;
        if e.info.shape != [len] {
            return Err(self.wrong_shape(e, name, &[len]));
        }
        Ok(self.to_f32(name)?.0)
    }

    fn bytes<'a>(&'a self, e: &'a Entry) -> &'a [u8] {
        &self.shards[e.shard].map[e.start..e.end]
    }

    /// The tensor's elements as a typed slice: borrowed straight from the mapping when the
    /// bytes are aligned for the type (and the host is little-endian, as the format is),
    /// otherwise copied once into an aligned buffer.
    fn weight_data<'a>(&'a self, e: &'a Entry, name: &str) -> Result<WeightData<'a>> {
        let bytes = self.bytes(e);
        Ok(match e.info.dtype {
            Dtype::F32 => WeightData::F32(match cast(bytes) {
                Some(s) => s,
                None => match e.copy.get_or_init(|| {
                    Owned::F32(
                        bytes
                            .chunks_exact(4)
                            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                            .collect(),
                    )
                }) {
                    Owned::F32(v) => v,
                    _ => unreachable!("the copy has the entry's dtype"),
                },
            }),
            Dtype::BF16 => WeightData::Bf16(match cast(bytes) {
                Some(s) => s,
                None => match e.copy.get_or_init(|| {
                    Owned::Bf16(
                        bytes
                            .chunks_exact(2)
                            .map(|b| bf16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                            .collect(),
                    )
                }) {
                    Owned::Bf16(v) => v,
                    _ => unreachable!("the copy has the entry's dtype"),
                },
            }),
            Dtype::F16 => WeightData::F16(match cast(bytes) {
                Some(s) => s,
                None => match e.copy.get_or_init(|| {
                    Owned::F16(
                        bytes
                            .chunks_exact(2)
                            .map(|b| f16::from_bits(u16::from_le_bytes([b[0], b[1]])))
                            .collect(),
                    )
                }) {
                    Owned::F16(v) => v,
                    _ => unreachable!("the copy has the entry's dtype"),
                },
            }),
            other => {
                let problem = CheckpointProblem::Dtype {
                    found: other.to_string(),
                    expected: "F32, BF16 or F16".into(),
                };
                return Err(self.bad(e, name, problem));
            }
        })
    }
}

/// Reinterprets little-endian bytes as `T` without copying, when they are aligned for `T`
/// and the host is little-endian. `bytemuck` checks size and alignment, so no `unsafe`.
fn cast<T: bytemuck::Pod>(bytes: &[u8]) -> Option<&[T]> {
    if cfg!(target_endian = "little") {
        bytemuck::try_cast_slice(bytes).ok()
    } else {
        None
    }
}

/// Rows `start .. start + rows` of a matrix, as a matrix (a fused expert tensor's block).
/// Panics if the block runs past the matrix (callers check shapes first).
pub fn row_block<'a>(m: &Matrix<'a>, start: usize, rows: usize) -> Matrix<'a> {
    m.row_block(start, rows)
}

#[cfg(test)]
mod tests;
