//! Where the weights come from (chapter 9): a Hugging Face checkpoint, a llama.cpp GGUF
//! file, or either one widened to owned f32 (`--reference`).
//!
//! [`Weights::load`](super::weights::Weights::load) asks for every tensor by its Hugging
//! Face name and shape; [`Tensors`] answers from the source it wraps. A GGUF file's names
//! are translated through [`gguf_names`], its stacked experts come back
//! whole (the loader cuts them into per-expert row blocks, no copy), F32 / F16 / BF16
//! tensors map to the kernels' float variants and block formats to
//! [`WeightData::Quant`]: nothing is dequantised on the default path but the norms and
//! biases (small, [`Tensors::vector`]). Errors name the file, the GGUF name and the Hugging
//! Face role it plays, and both shapes when they differ.

use crate::checkpoint::{Checkpoint, Dtype};
use crate::error::{CheckpointProblem, Error, Result};
use crate::gguf::{Gguf, GgufTensor};
use crate::kernels::{Matrix, WeightData};
use crate::quant::GgmlType;
use crate::qwen3::gguf_names;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A source of weights, borrowed.
#[derive(Clone, Copy, Debug)]
pub enum Tensors<'a> {
    Safetensors(&'a Checkpoint),
    Gguf(&'a Gguf),
    /// Every tensor of a source as owned f32 (the `--reference` pass).
    F32(&'a F32Tensors),
}

/// An opened model file: a Hugging Face checkpoint directory or a GGUF file.
#[derive(Debug)]
pub enum ModelFile {
    Safetensors(Checkpoint),
    Gguf(Gguf),
}

/// Every tensor of a source dequantised (or widened) to f32 and owned, keyed by the
/// source's own names: the store the reference pass borrows its matrices from, so it
/// outlives the [`Weights`](super::weights::Weights) that view it.
#[derive(Debug)]
pub struct F32Tensors {
    file: PathBuf,
    /// Names are GGUF names (translated on lookup) rather than Hugging Face ones.
    gguf_names: bool,
    /// name → (row-major shape, values).
    tensors: HashMap<String, (Vec<usize>, Vec<f32>)>,
}

impl<'a> From<&'a Checkpoint> for Tensors<'a> {
    fn from(c: &'a Checkpoint) -> Self {
        Tensors::Safetensors(c)
    }
}

impl<'a> From<&'a Gguf> for Tensors<'a> {
    fn from(g: &'a Gguf) -> Self {
        Tensors::Gguf(g)
    }
}

impl<'a> From<&'a F32Tensors> for Tensors<'a> {
    fn from(s: &'a F32Tensors) -> Self {
        Tensors::F32(s)
    }
}

impl<'a> From<&'a ModelFile> for Tensors<'a> {
    fn from(m: &'a ModelFile) -> Self {
        match m {
            ModelFile::Safetensors(c) => Tensors::Safetensors(c),
            ModelFile::Gguf(g) => Tensors::Gguf(g),
        }
    }
}

impl ModelFile {
    /// Bytes of tensor data in the file(s).
    pub fn data_bytes(&self) -> usize {
        match self {
            ModelFile::Safetensors(c) => c.data_bytes(),
            ModelFile::Gguf(g) => g.tensors().iter().map(|t| t.size as usize).sum(),
        }
    }

    /// The directory or file it was opened from.
    pub fn path(&self) -> &Path {
        match self {
            ModelFile::Safetensors(c) => c.dir(),
            ModelFile::Gguf(g) => g.path(),
        }
    }
}

/// A tensor found for a role: its row-major shape and its matrix view.
struct Found<'a> {
    shape: Vec<usize>,
    matrix: Matrix<'a>,
}

impl<'a> Tensors<'a> {
    /// The file (or directory) errors name.
    pub fn path(&self) -> &'a Path {
        match self {
            Tensors::Safetensors(c) => c.dir(),
            Tensors::Gguf(g) => g.path(),
            Tensors::F32(s) => &s.file,
        }
    }

    /// The file that holds the tensor playing Hugging Face role `hf`: a checkpoint's shard,
    /// else the one file (or the directory, for a name no shard has).
    pub fn file_of(&self, hf: &str) -> &'a Path {
        match self {
            Tensors::Safetensors(c) => c.file_of(hf).unwrap_or(c.dir()),
            _ => self.path(),
        }
    }

    /// Whether the source names tensors as a GGUF file does.
    pub fn gguf_names(&self) -> bool {
        match self {
            Tensors::Safetensors(_) => false,
            Tensors::Gguf(_) => true,
            Tensors::F32(s) => s.gguf_names,
        }
    }

    /// The name a Hugging Face tensor has in this source (the name itself for a
    /// checkpoint, or `None` if a GGUF file has no name for that role).
    fn native(&self, hf: &str) -> Option<String> {
        if !self.gguf_names() {
            return Some(hf.to_string());
        }
        gguf_names::to_gguf(hf).map(|g| g.name)
    }

    /// How errors name a tensor: the GGUF name and the Hugging Face role, or the one name.
    fn label(&self, hf: &str) -> String {
        match self.native(hf) {
            Some(n) if n != hf => format!("{n} ({hf})"),
            Some(n) => n,
            None => format!("{hf} (no GGUF name)"),
        }
    }

    fn error(&self, hf: &str, problem: CheckpointProblem) -> Error {
        Error::Checkpoint {
            file: self.path().to_path_buf(),
            tensor: Some(self.label(hf)),
            problem,
        }
    }

    /// Whether the source has the tensor playing Hugging Face role `hf`.
    pub fn contains(&self, hf: &str) -> bool {
        let Some(name) = self.native(hf) else {
            return false;
        };
        match self {
            Tensors::Safetensors(c) => c.contains(&name),
            Tensors::Gguf(g) => g.tensor(&name).is_some(),
            Tensors::F32(s) => s.tensors.contains_key(&name),
        }
    }

    /// A tensor of exactly `shape` (row-major), viewed as a matrix whose columns are the
    /// last dimension and whose rows are all the others.
    pub fn tensor(&self, hf: &str, shape: &[usize]) -> Result<Matrix<'a>> {
        if let Tensors::Safetensors(c) = self {
            return c.tensor(hf, shape);
        }
        let found = self.find(hf)?;
        if found.shape != shape {
            return Err(self.error(
                hf,
                CheckpointProblem::Shape {
                    found: found.shape,
                    expected: shape.to_vec(),
                },
            ));
        }
        Ok(found.matrix)
    }

    /// A 2-D weight `[rows, cols]`.
    pub fn matrix(&self, hf: &str, rows: usize, cols: usize) -> Result<Matrix<'a>> {
        self.tensor(hf, &[rows, cols])
    }

    /// A 1-D tensor of length `len` as owned f32 (norm weights, biases): widened, or
    /// dequantised when a GGUF file stores it in a block format.
    pub fn vector(&self, hf: &str, len: usize) -> Result<Vec<f32>> {
        if let Tensors::Safetensors(c) = self {
            return c.vector(hf, len);
        }
        let m = self.tensor(hf, &[len])?;
        let mut out = vec![0.0f32; len];
        m.row_into(0, &mut out);
        Ok(out)
    }

    /// The stacked experts of a GGUF file, `[n, rows, cols]` viewed as `[n·rows, cols]`, for
    /// the Hugging Face role of expert 0 (`...mlp.experts.0.gate_proj.weight`); `None` when
    /// the source does not stack experts (a Hugging Face checkpoint) or has no such tensor.
    pub fn expert_stack(&self, hf_expert0: &str, shape: [usize; 3]) -> Result<Option<Matrix<'a>>> {
        let stacked = gguf_names::to_gguf(hf_expert0).is_some_and(|g| g.expert.is_some());
        let gguf =
            matches!(self, Tensors::Gguf(_)) || matches!(self, Tensors::F32(s) if s.gguf_names);
        if !(stacked && gguf && self.contains(hf_expert0)) {
            return Ok(None);
        }
        self.tensor(hf_expert0, &shape).map(Some)
    }

    /// The tensor behind Hugging Face role `hf` in a GGUF file or an f32 store.
    fn find(&self, hf: &str) -> Result<Found<'a>> {
        let missing = || self.error(hf, CheckpointProblem::Missing);
        let name = self.native(hf).ok_or_else(missing)?;
        match self {
            Tensors::Safetensors(_) => unreachable!("checkpoints answer for themselves"),
            Tensors::F32(s) => {
                let (shape, data) = s.tensors.get(&name).ok_or_else(missing)?;
                let cols = shape.last().copied().unwrap_or(1);
                let rows = data.len() / cols.max(1);
                Ok(Found {
                    shape: shape.clone(),
                    matrix: Matrix::f32(data, rows, cols),
                })
            }
            Tensors::Gguf(g) => {
                let t = g.tensor(&name).ok_or_else(missing)?;
                let shape = t.shape();
                let matrix = gguf_matrix(g, t).map_err(|p| self.error(hf, p))?;
                Ok(Found { shape, matrix })
            }
        }
    }
}

/// A GGUF tensor as a matrix in its stored type (columns: the contiguous axis). Float
/// types are borrowed from the mapping when aligned for their type (GGUF aligns tensor data
/// to `general.alignment`, 32 by default); a misaligned one is refused.
fn gguf_matrix<'a>(
    g: &'a Gguf,
    t: &GgufTensor,
) -> std::result::Result<Matrix<'a>, CheckpointProblem> {
    let shape = t.shape();
    let cols = shape.last().copied().unwrap_or(1);
    let rows = shape[..shape.len().saturating_sub(1)]
        .iter()
        .product::<usize>();
    let bytes = g.data(t);
    if t.ty
        .row_bytes(cols as u64)
        .and_then(|r| r.checked_mul(rows as u64))
        != Some(bytes.len() as u64)
    {
        return Err(CheckpointProblem::Malformed(format!(
            "{} bytes for shape {shape:?} of type {}",
            bytes.len(),
            t.ty.name()
        )));
    }
    let misaligned = || {
        CheckpointProblem::Malformed(format!(
            "data not aligned for {} (alignment {})",
            t.ty.name(),
            g.alignment()
        ))
    };
    let data = match t.ty {
        GgmlType::F32 => WeightData::F32(cast(bytes).ok_or_else(misaligned)?),
        GgmlType::F16 => WeightData::F16(cast(bytes).ok_or_else(misaligned)?),
        GgmlType::Bf16 => WeightData::Bf16(cast(bytes).ok_or_else(misaligned)?),
        ty => WeightData::Quant { ty, bytes },
    };
    Ok(Matrix { data, rows, cols })
}

/// Little-endian bytes as `T`, when aligned for it (bytemuck checks; no `unsafe`).
fn cast<T: bytemuck::Pod>(bytes: &[u8]) -> Option<&[T]> {
    if cfg!(target_endian = "little") {
        bytemuck::try_cast_slice(bytes).ok()
    } else {
        None
    }
}

impl F32Tensors {
    /// Every tensor of `src` as owned f32 (an f32 store is copied as it is). Checks first
    /// that the machine has the memory for them.
    pub fn of(src: Tensors) -> Result<F32Tensors> {
        let file = src.path().to_path_buf();
        let what = format!("{}: every weight as f32 (--reference)", file.display());
        let mut tensors = HashMap::new();
        match src {
            Tensors::F32(s) => {
                for (k, (shape, v)) in &s.tensors {
                    tensors.insert(k.clone(), (shape.clone(), v.clone()));
                }
            }
            Tensors::Gguf(g) => {
                let total: u128 = g.tensors().iter().map(|t| 4 * t.elements() as u128).sum();
                crate::limits::check_memory(&what, total)?;
                for t in g.tensors() {
                    let m = gguf_matrix(g, t).map_err(|problem| Error::Checkpoint {
                        file: file.clone(),
                        tensor: Some(t.name.clone()),
                        problem,
                    })?;
                    tensors.insert(t.name.clone(), (t.shape(), widen(&m)));
                }
            }
            Tensors::Safetensors(c) => {
                let mut total = 0u128;
                for name in c.names() {
                    total += 4 * c.info(name)?.shape.iter().product::<usize>() as u128;
                }
                crate::limits::check_memory(&what, total)?;
                for name in c.names() {
                    // Integer buffers (none in a Qwen checkpoint) are not weights: left out.
                    if matches!(
                        c.info(name)?.dtype,
                        Dtype::F32 | Dtype::BF16 | Dtype::F16 | Dtype::F64
                    ) {
                        let (v, shape) = c.to_f32(name)?;
                        tensors.insert(name.to_string(), (shape, v));
                    }
                }
            }
        }
        Ok(F32Tensors {
            file,
            gguf_names: src.gguf_names(),
            tensors,
        })
    }
}

/// Every row of `m` widened (or dequantised) to f32, row after row.
fn widen(m: &Matrix) -> Vec<f32> {
    let mut out = vec![0.0f32; m.rows * m.cols];
    for (r, row) in out.chunks_exact_mut(m.cols.max(1)).enumerate() {
        m.row_into(r, row);
    }
    out
}
