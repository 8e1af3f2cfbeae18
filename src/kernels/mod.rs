//! Primitives on slices shared by every chapter: dot products, softmax, RMSNorm, SiLU,
//! matrix-vector products, and the weight types they read. They are written so LLVM
//! vectorises them (independent accumulators over `chunks_exact`) and they are the only
//! copies in the crate: the chapters and the model call these rather than writing their own.
//!
//! The clear reference kernels live here; the faster forms of chapter 10 sit beside them:
//! - [`matmul`]: the batched and grouped matmuls (the engine's projections, MoE experts);
//! - [`attention`]: the mask and attention, clear (chapters 3, 9) and fast (chapter 10);
//! - [`gemm`]: a strided f32 GEMM, and [`exp`]: a vector `exp` and the column softmax
//!   passes — the training step's products and LM-head loss (chapter 12);
//! - `x86`: the AVX2 / AVX-512 tiles and attention, chosen at run time, compiled on x86-64
//!   only. Elsewhere a stub of the same name declines every fast path, so the portable
//!   code runs and no other file needs a `cfg`.
//!
//! Weights in llama.cpp's block formats (Q8_0, Q4_K, ...; chapter 11) are a fourth
//! [`WeightData`] variant: the kernels read them block by block through
//! [`Matrix::row_slice_into`], which dequantises only the blocks a span covers, so a GGUF
//! model runs from its mapped file with no dequantised copy. [`quant`] holds the int8 path:
//! activations quantised to 8-bit blocks, dotted with the weight blocks in integers, as
//! llama.cpp does (on unless `ANATOMY_QUANT_ACTIVATIONS=0`).
//!
//! Every fast kernel is pinned equal to its reference by a test in the file that calls it.

pub mod attention;
pub mod attention_block;
pub mod bf16;
pub mod dispatch;
pub mod exp;
pub mod gemm;
pub mod matmul;
pub mod policy;
pub mod quant;
pub(crate) mod scratch;
#[cfg(target_arch = "x86_64")]
mod x86;

// Paths that predate the split (`kernels::attend`, `kernels::matmul_grouped`, ...).
pub use attention::{attend, attend_reference};
pub use matmul::{Group, matmul_grouped};
pub use x86::use_avx512;

use crate::quant::{GgmlType, QK_K};

/// The element type of a weight matrix as stored (weights stay in their checkpoint dtype
/// and are widened to f32 inside the kernels).
#[derive(Clone, Copy, Debug)]
pub enum WeightData<'a> {
    F32(&'a [f32]),
    Bf16(&'a [half::bf16]),
    F16(&'a [half::f16]),
    /// A block format of ggml: row `r` is the bytes `bytes[r · row_bytes ..][..row_bytes]`,
    /// `row_bytes = ty.row_bytes(cols)` (rows are a whole number of blocks).
    Quant {
        ty: GgmlType,
        bytes: &'a [u8],
    },
}

impl WeightData<'_> {
    /// The stored type's name: `"f32"`, `"bf16"`, `"f16"` or ggml's (`"q4_K"`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            WeightData::F32(_) => "f32",
            WeightData::Bf16(_) => "bf16",
            WeightData::F16(_) => "f16",
            WeightData::Quant { ty, .. } => ty.name(),
        }
    }

    /// The stored type as ggml names it (the row of `dispatch::TABLE` it reads).
    pub fn ggml_type(&self) -> GgmlType {
        match self {
            WeightData::F32(_) => GgmlType::F32,
            WeightData::Bf16(_) => GgmlType::Bf16,
            WeightData::F16(_) => GgmlType::F16,
            WeightData::Quant { ty, .. } => *ty,
        }
    }
}

/// A borrowed row-major `[rows, cols]` weight matrix (an nn.Linear's `[out, in]`).
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub data: WeightData<'a>,
    pub rows: usize,
    pub cols: usize,
}

/// Dot product with eight independent accumulators, so the loop vectorises without
/// `-ffast-math` (the summation order is fixed, hence deterministic).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// Softmax in place, numerically stable (the maximum is subtracted first).
/// An empty slice is left as it is.
pub fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return;
    }
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// RMSNorm: `y = x / sqrt(mean(x²) + eps) ⊙ weight`. The mean square is accumulated in f32,
/// as Hugging Face's Qwen3 implementation does after casting to float32.
pub fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    assert_eq!(x.len(), weight.len(), "rmsnorm: weight length");
    let ms = dot(x, x) / x.len() as f32;
    let inv = 1.0 / (ms + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = w * (v * inv);
    }
}

/// SiLU (swish): `x · σ(x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Buffers of at least this many values are split over the thread pool by
/// [`for_each_row`]; a decode step's stay on the calling thread.
pub const PARALLEL_ROWS_MIN_VALUES: usize = 1 << 15;

/// `f(i, row)` for each row `i` of `rows` (`width` values each; a last shorter row keeps
/// what is left), over the thread pool when `rows` holds at least
/// [`PARALLEL_ROWS_MIN_VALUES`]. Each row is written by one call only, so the results are
/// the same bits whichever thread runs it.
pub fn for_each_row(rows: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    assert!(width > 0, "for_each_row: zero width");
    if rows.len() >= PARALLEL_ROWS_MIN_VALUES && rows.len() > width {
        use rayon::prelude::*;
        rows.par_chunks_mut(width)
            .enumerate()
            .for_each(|(i, row)| f(i, row));
    } else {
        rows.chunks_mut(width)
            .enumerate()
            .for_each(|(i, row)| f(i, row));
    }
}

/// The index of the first NaN or infinite value of `x`, if any. The usual case — every
/// value finite — is one pass that vectorises: `v · 0` is 0 for a finite `v` and NaN
/// otherwise, summed in sixteen independent lanes; only a slice that fails is searched.
pub fn first_non_finite(x: &[f32]) -> Option<usize> {
    let mut acc = [0.0f32; 16];
    let chunks = x.chunks_exact(16);
    let mut tail = 0.0f32;
    for v in chunks.remainder() {
        tail += v * 0.0;
    }
    for c in chunks {
        for k in 0..16 {
            acc[k] += c[k] * 0.0;
        }
    }
    if tail == 0.0 && acc.iter().all(|a| *a == 0.0) {
        return None;
    }
    x.iter().position(|v| !v.is_finite())
}

/// `out[r] = Σ_c w[r, c] · x[c]` for a row-major `[rows, x.len()]` matrix.
pub fn matvec(w: &[f32], x: &[f32], out: &mut [f32]) {
    let cols = x.len();
    assert_eq!(w.len(), out.len() * cols, "matvec: shape");
    for (o, row) in out.iter_mut().zip(w.chunks_exact(cols)) {
        *o = dot(row, x);
    }
}

impl<'a> Matrix<'a> {
    /// An f32 matrix; panics if `data.len() != rows·cols` (a programming error: loaders
    /// check shapes against the config before building matrices).
    pub fn f32(data: &'a [f32], rows: usize, cols: usize) -> Self {
        assert_eq!(data.len(), rows * cols, "Matrix::f32: shape");
        Matrix {
            data: WeightData::F32(data),
            rows,
            cols,
        }
    }

    pub fn bf16(data: &'a [half::bf16], rows: usize, cols: usize) -> Self {
        assert_eq!(data.len(), rows * cols, "Matrix::bf16: shape");
        Matrix {
            data: WeightData::Bf16(data),
            rows,
            cols,
        }
    }

    pub fn f16(data: &'a [half::f16], rows: usize, cols: usize) -> Self {
        assert_eq!(data.len(), rows * cols, "Matrix::f16: shape");
        Matrix {
            data: WeightData::F16(data),
            rows,
            cols,
        }
    }

    /// A matrix in a block format, `bytes` holding `rows` rows of `ty.row_bytes(cols)`
    /// bytes. Panics if `cols` is not a whole number of blocks or the length is not that
    /// (a programming error: loaders check both before building matrices).
    pub fn quant(ty: GgmlType, bytes: &'a [u8], rows: usize, cols: usize) -> Self {
        let row_bytes = ty
            .row_bytes(cols as u64)
            .expect("Matrix::quant: partial block");
        assert_eq!(
            Some(bytes.len() as u64),
            row_bytes.checked_mul(rows as u64),
            "Matrix::quant: shape"
        );
        Matrix {
            data: WeightData::Quant { ty, bytes },
            rows,
            cols,
        }
    }

    /// Rows `start .. start + rows`, as a matrix (a fused or stacked expert tensor's
    /// block; no copy). Panics if the block runs past the matrix (callers check shapes).
    pub fn row_block(&self, start: usize, rows: usize) -> Matrix<'a> {
        assert!(start + rows <= self.rows, "row_block: rows out of range");
        let span = start * self.cols..(start + rows) * self.cols;
        let data = match self.data {
            WeightData::F32(d) => WeightData::F32(&d[span]),
            WeightData::Bf16(d) => WeightData::Bf16(&d[span]),
            WeightData::F16(d) => WeightData::F16(&d[span]),
            WeightData::Quant { ty, bytes } => {
                let row_bytes = bytes.len() / self.rows.max(1);
                WeightData::Quant {
                    ty,
                    bytes: &bytes[start * row_bytes..(start + rows) * row_bytes],
                }
            }
        };
        Matrix {
            data,
            rows,
            cols: self.cols,
        }
    }

    /// The bytes the weights take as stored (scales included for block formats).
    pub fn stored_bytes(&self) -> usize {
        match self.data {
            WeightData::F32(d) => 4 * d.len(),
            WeightData::Bf16(d) => 2 * d.len(),
            WeightData::F16(d) => 2 * d.len(),
            WeightData::Quant { bytes, .. } => bytes.len(),
        }
    }

    /// Columns `c0 .. c0 + out.len()` of row `r`, widened to f32. (Inlined, so inside the
    /// AVX-512 kernels the widening loop is vectorised with their instructions.) A block
    /// format dequantises the blocks that cover the span, at most [`QK_K`] weights at a
    /// time through a stack buffer, so nothing is allocated.
    #[inline]
    pub fn row_slice_into(&self, r: usize, c0: usize, out: &mut [f32]) {
        let span = r * self.cols + c0..r * self.cols + c0 + out.len();
        assert!(c0 + out.len() <= self.cols, "row_slice_into: past the row");
        match self.data {
            WeightData::Quant { ty, bytes } => quant_row_slice(ty, bytes, self.cols, r, c0, out),
            WeightData::F32(d) => out.copy_from_slice(&d[span]),
            WeightData::Bf16(d) => {
                for (o, v) in out.iter_mut().zip(&d[span]) {
                    *o = v.to_f32();
                }
            }
            WeightData::F16(d) => {
                for (o, v) in out.iter_mut().zip(&d[span]) {
                    *o = v.to_f32();
                }
            }
        }
    }

    /// Row `r` widened to f32 into `out` (length `cols`).
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.cols, "row_into: output length");
        self.row_slice_into(r, 0, out);
    }

    /// The first `(row, column)` holding a NaN or infinite weight, if any (a scan of the
    /// whole matrix, for locating the source of a non-finite activation).
    pub fn find_non_finite(&self) -> Option<(usize, usize)> {
        let mut row = vec![0.0f32; self.cols];
        (0..self.rows).find_map(|r| {
            self.row_into(r, &mut row);
            first_non_finite(&row).map(|c| (r, c))
        })
    }

    /// `out = W·x` (`x` has `cols` entries, `out` has `rows`). The clear reference
    /// version: f32 weights go straight to [`dot`]; bf16/f16 rows are widened first; a
    /// block format is dequantised a chunk of blocks at a time, each chunk dotted with
    /// its part of `x`. [`Matrix::matmul`] is the fast, batched form.
    pub fn matvec(&self, x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), self.cols, "matvec: input length");
        assert_eq!(out.len(), self.rows, "matvec: output length");
        match self.data {
            WeightData::F32(d) => matvec(d, x, out),
            WeightData::Quant { ty, .. } => {
                let chunk = quant_chunk(ty);
                let mut buf = [0.0f32; QK_K];
                for (r, o) in out.iter_mut().enumerate() {
                    *o = 0.0;
                    for (c0, xc) in (0..self.cols).step_by(chunk).zip(x.chunks(chunk)) {
                        let w = &mut buf[..xc.len()];
                        self.row_slice_into(r, c0, w);
                        *o += dot(w, xc);
                    }
                }
            }
            _ => {
                let mut row = vec![0.0f32; self.cols];
                for (r, o) in out.iter_mut().enumerate() {
                    self.row_into(r, &mut row);
                    *o = dot(&row, x);
                }
            }
        }
    }
}

/// Weights per dequantisation step of a block format: as many whole blocks as fill
/// [`QK_K`] (one K block, eight 32-weight blocks, or 256 floats).
fn quant_chunk(ty: GgmlType) -> usize {
    let bs = ty.block_size();
    (QK_K / bs).max(1) * bs
}

/// [`Matrix::row_slice_into`] for a block format: dequantises the blocks of row `r` that
/// cover columns `c0 .. c0 + out.len()`: whole blocks straight into `out`, a span that cuts
/// a block a chunk of blocks at a time into a stack buffer, copying the span out of them.
fn quant_row_slice(ty: GgmlType, bytes: &[u8], cols: usize, r: usize, c0: usize, out: &mut [f32]) {
    let (bs, block_bytes) = (ty.block_size(), ty.block_bytes());
    let row = &bytes[r * (cols / bs * block_bytes)..][..cols / bs * block_bytes];
    if c0.is_multiple_of(bs) && out.len().is_multiple_of(bs) {
        // Whole blocks (the panels widen whole rows) go straight into `out`.
        let first = c0 / bs * block_bytes;
        widen_blocks(ty, &row[first..first + out.len() / bs * block_bytes], out);
        return;
    }
    let chunk = quant_chunk(ty);
    let mut buf = [0.0f32; QK_K];
    let end = c0 + out.len();
    // Whole chunks from the block holding c0; the last chunk may be short.
    let mut start = c0 / bs * bs;
    while start < end {
        let stop = (start + chunk).min(end.div_ceil(bs) * bs);
        let n = stop - start;
        crate::quant::dequantize(
            ty,
            &row[start / bs * block_bytes..stop / bs * block_bytes],
            &mut buf[..n],
        );
        let (lo, hi) = (c0.max(start), end.min(stop));
        out[lo - c0..hi - c0].copy_from_slice(&buf[lo - start..hi - start]);
        start = stop;
    }
}

/// [`crate::quant::dequantize`] of whole blocks, compiled for AVX2 where the CPU has it
/// (the same arithmetic, so the same values; the baseline build is SSE2).
fn widen_blocks(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if policy::cpu().avx2_fma() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked just above).
        unsafe { widen_blocks_avx2(ty, bytes, out) };
        return;
    }
    crate::quant::dequantize(ty, bytes, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn widen_blocks_avx2(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    crate::quant::dequantize(ty, bytes, out);
}

// ---- Views the kernels share (here, below matmul.rs, attention.rs and x86.rs, so those
// files import them from one place and none imports another's types).

/// Where one KV head's keys and values sit in the cache: position `j`'s vector is
/// `data[j · stride + offset ..][..head_dim]`.
#[derive(Clone, Copy, Debug)]
pub struct KvHead<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub stride: usize,
    pub offset: usize,
}

/// The output pointer shared by the tasks of one [`matmul_grouped`].
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the pointer is only written through `Out::set`, whose contract makes the tasks of
// one matmul write disjoint elements (each owns one row block of one group, and the groups'
// output rows were checked disjoint), and `matmul_grouped` holds
// the `&mut [f32]` it came from until every task has finished.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// One task's view of `out` (`[n, stride]`): it owns its block of rows from `r0`. Only
/// `matmul::run_jobs` makes one; the kernels write through [`Out::set`].
#[derive(Clone, Copy)]
struct Out {
    ptr: OutPtr,
    stride: usize,
    r0: usize,
}

/// Output rows handed to one rayon task (large enough to amortise scheduling, small
/// enough that both cores get many tasks and the row block stays in L2).
const ROW_BLOCK: usize = 32;

/// Output rows of a decode task (every group one token, rows read once) whose rows are
/// dequantised into a buffer first.
const DECODE_ROW_BLOCK: usize = 64;
/// Bytes of weights a decode task whose kernel streams its rows reads (as rows): a task's
/// row streams start cold, so longer ones read faster (`examples/matvec_rates`).
const DECODE_JOB_BYTES: usize = 512 << 10;
/// Decode tasks a thread gets at least, so the threads finish together.
const DECODE_JOBS_PER_THREAD: usize = 2;
/// The fewest and the most rows of a decode task that streams its rows.
const MIN_DECODE_ROWS: usize = 16;
const MAX_DECODE_ROWS: usize = 1024;
/// Tokens per input panel: two 16-lane vectors.
const PANEL: usize = 32;

impl OutPtr {
    /// The pointer `n` floats further on (a method, so closures capture the whole `Sync`
    /// wrapper rather than its raw field).
    fn offset(self, n: usize) -> OutPtr {
        OutPtr(self.0.wrapping_add(n))
    }
}

impl Out {
    /// `out[t, r0 + r] = v`.
    ///
    /// # Safety
    /// `r` must be a row of this task's block (`r < ROW_BLOCK`, `r0 + r < stride`) and
    /// `t < n`: then the element is inside `out` (`n · stride` long) and no other task
    /// writes it (the other tasks own other row blocks).
    #[inline(always)]
    unsafe fn set(self, t: usize, r: usize, v: f32) {
        // SAFETY: in bounds and unshared, by the caller's contract above.
        unsafe { *self.ptr.0.add(t * self.stride + self.r0 + r) = v };
    }

    /// `out[t, r0 + r + i] = v[i]` for every `i`: a token's consecutive rows in one copy.
    ///
    /// # Safety
    /// As [`Out::set`] for each of the rows `r .. r + v.len()`.
    #[inline(always)]
    unsafe fn set_rows(self, t: usize, r: usize, v: &[f32]) {
        // SAFETY: the rows are in bounds and unshared, by the caller's contract above; `v`
        // is a separate borrow, so the ranges do not overlap.
        unsafe {
            let dst = self.ptr.0.add(t * self.stride + self.r0 + r);
            std::ptr::copy_nonoverlapping(v.as_ptr(), dst, v.len());
        }
    }
}

/// Off x86-64 there are no SIMD kernels: this stands in for `x86.rs` with the same entry
/// points, each declining, so the callers' portable paths run.
#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::Matrix;
    use super::{KvHead, Out};
    use std::ops::Range;

    /// No AVX-512 tiles here.
    pub fn use_avx512() -> bool {
        false
    }

    /// Declines: the portable tiles run.
    ///
    /// # Safety
    /// None needed; it touches nothing (the signature is `x86.rs`'s).
    pub(super) unsafe fn tiles(
        _: &Matrix,
        _: Range<usize>,
        _: &[f32],
        _: usize,
        _: Out,
        _: bool,
    ) -> bool {
        false
    }

    /// Unreachable: panels are only packed when the CPU has AVX-512F or AVX2 and FMA.
    ///
    /// # Safety
    /// None needed; it panics (the signature is `x86.rs`'s).
    pub(super) unsafe fn gemm_block(_: &Matrix, _: Range<usize>, _: &[f32], _: usize, _: Out) {
        unreachable!("gemm_block: no input panels are packed off x86-64")
    }

    /// Unreachable, as [`gemm_block`].
    ///
    /// # Safety
    /// None needed; it panics (the signature is `x86.rs`'s).
    pub(super) unsafe fn gemm_block_avx2(_: &Matrix, _: Range<usize>, _: &[f32], _: usize, _: Out) {
        unreachable!("gemm_block_avx2: no input panels are packed off x86-64")
    }

    /// Declines: the portable block scores run.
    ///
    /// # Safety
    /// None needed; it touches nothing (the signature is `x86.rs`'s).
    pub(super) unsafe fn block_scores(
        _: &[f32],
        _: usize,
        _: KvHead,
        _: Range<usize>,
        _: f32,
        _: &mut [f32],
    ) -> bool {
        false
    }

    /// Declines: the portable block values run.
    ///
    /// # Safety
    /// None needed; it touches nothing (the signature is `x86.rs`'s).
    pub(super) unsafe fn block_values(
        _: &[f32],
        _: &[f32],
        _: KvHead,
        _: Range<usize>,
        _: usize,
        _: &mut [f32],
    ) -> bool {
        false
    }

    /// Declines: the reference attention runs.
    ///
    /// # Safety
    /// None needed; it touches nothing (the signature is `x86.rs`'s).
    pub(super) unsafe fn attend(
        _: &[f32],
        _: usize,
        _: KvHead,
        _: Range<usize>,
        _: f32,
        _: &mut Vec<f32>,
        _: &mut [f32],
    ) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_non_finite_finds_nan_and_infinity_anywhere() {
        let mut x = vec![1.0f32; 37];
        assert_eq!(first_non_finite(&x), None);
        for (i, bad) in [(0, f32::NAN), (20, f32::INFINITY), (36, f32::NEG_INFINITY)] {
            let keep = x[i];
            x[i] = bad;
            assert_eq!(first_non_finite(&x), Some(i));
            x[i] = keep;
        }
        assert_eq!(first_non_finite(&[f32::MAX, -f32::MAX, 0.0, -0.0]), None);
        let m = Matrix::f32(&[1.0, 2.0, f32::NAN, 4.0], 2, 2);
        assert_eq!(m.find_non_finite(), Some((1, 0)));
    }

    #[test]
    fn dot_matches_f64_sum() {
        let a: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11).cos()).collect();
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        assert!((dot(&a, &b) as f64 - exact).abs() < 1e-5);
    }

    #[test]
    fn softmax_sums_to_one_and_keeps_order() {
        let mut x = vec![1.0, 3.0, 2.0, -1000.0];
        softmax_in_place(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[1] > x[2] && x[2] > x[0] && x[3] == 0.0);
    }

    #[test]
    fn rmsnorm_of_constant_vector_is_weight() {
        let x = vec![3.0f32; 16];
        let w: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let mut out = vec![0.0; 16];
        rmsnorm(&x, &w, 0.0, &mut out);
        for (o, wi) in out.iter().zip(&w) {
            assert!((o - wi).abs() < 1e-6);
        }
    }
}
