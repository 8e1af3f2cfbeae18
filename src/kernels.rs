//! Primitives on slices shared by every chapter: dot products, softmax, RMSNorm, SiLU,
//! matrix-vector products. They are written so LLVM vectorises them (independent
//! accumulators over `chunks_exact`) and they are the only copies in the crate: the
//! chapters and the model call these rather than writing their own.

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

/// `out[r] = Σ_c w[r, c] · x[c]` for a row-major `[rows, x.len()]` matrix.
pub fn matvec(w: &[f32], x: &[f32], out: &mut [f32]) {
    let cols = x.len();
    assert_eq!(w.len(), out.len() * cols, "matvec: shape");
    for (o, row) in out.iter_mut().zip(w.chunks_exact(cols)) {
        *o = dot(row, x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

/// The element type of a weight matrix as stored (weights stay in their checkpoint dtype
/// and are widened to f32 inside the kernels).
#[derive(Clone, Copy, Debug)]
pub enum WeightData<'a> {
    F32(&'a [f32]),
    Bf16(&'a [half::bf16]),
    F16(&'a [half::f16]),
}

/// A borrowed row-major `[rows, cols]` weight matrix (an nn.Linear's `[out, in]`).
#[derive(Clone, Copy, Debug)]
pub struct Matrix<'a> {
    pub data: WeightData<'a>,
    pub rows: usize,
    pub cols: usize,
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

    /// Columns `c0 .. c0 + out.len()` of row `r`, widened to f32. (Inlined, so inside the
    /// AVX-512 kernels the widening loop is vectorised with their instructions.)
    #[inline]
    pub fn row_slice_into(&self, r: usize, c0: usize, out: &mut [f32]) {
        let span = r * self.cols + c0..r * self.cols + c0 + out.len();
        assert!(c0 + out.len() <= self.cols, "row_slice_into: past the row");
        match self.data {
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

    /// `out = W·x` (`x` has `cols` entries, `out` has `rows`). The clear reference
    /// version: f32 weights go straight to [`dot`]; bf16/f16 rows are widened first.
    pub fn matvec(&self, x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), self.cols, "matvec: input length");
        assert_eq!(out.len(), self.rows, "matvec: output length");
        match self.data {
            WeightData::F32(d) => matvec(d, x, out),
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

// ---------------------------------------------------------------------------------------
// Fast kernels (chapter 10). The reference `Matrix::matvec` above stays the definition;
// `Matrix::matmul` below computes the same products for a batch of token rows, in
// parallel over output rows (rayon), with an AVX2+FMA register-tiled inner kernel chosen
// at run time (`is_x86_feature_detected!`) and a portable fallback. Each output is one dot
// product over `cols`, summed in a different order than [`dot`]; tests pin the two equal
// within the summation error bound `2·cols·ε·Σ|w·x|`.
// ---------------------------------------------------------------------------------------

/// Output rows handed to one rayon task (large enough to amortise scheduling, small
/// enough that both cores get many tasks and the row block stays in L2).
const ROW_BLOCK: usize = 32;
/// Tokens whose inputs stay hot in L2 while a row group sweeps them.
const TOKEN_BLOCK: usize = 64;

impl Matrix<'_> {
    /// `out[t, r] = Σ_c W[r, c] · xs[t, c]` for `n = xs.len() / cols` token rows: the
    /// batched, parallel form of [`Matrix::matvec`] (`out` is `[n, rows]`, row-major).
    /// Each weight row block is read from memory once per call, whatever `n` is.
    pub fn matmul(&self, xs: &[f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        let avx512 = use_avx512();
        #[cfg(not(target_arch = "x86_64"))]
        let avx512 = false;
        self.matmul_with(xs, out, avx512);
    }

    /// [`Matrix::matmul`] with the AVX-512 tiles allowed or not (tests run both paths).
    fn matmul_with(&self, xs: &[f32], out: &mut [f32], avx512: bool) {
        assert!(
            self.cols > 0 && xs.len().is_multiple_of(self.cols),
            "matmul: input length"
        );
        let one = [Group {
            matrix: 0,
            first_in: 0,
            n: xs.len() / self.cols,
            first_out: 0,
        }];
        grouped_with(|_| *self, &one, xs, out, avx512);
    }
}

/// One member of a [`matmul_grouped`] call: matrix number `matrix` applied to `n`
/// consecutive input rows from row `first_in`, written to `n` output rows from `first_out`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub matrix: usize,
    pub first_in: usize,
    pub n: usize,
    pub first_out: usize,
}

// ANCHOR: matmul_grouped
/// A grouped matmul (the MoE layer's shape): for each group `g`,
/// `out[g.first_out + j, r] = Σ_c W[r, c] · xs[g.first_in + j, c]` for `j < g.n`, with
/// `W = matrix(g.matrix)`. Every matrix has the same `[rows, cols]`; `xs` is `[·, cols]`
/// and `out` `[·, rows]`. All groups' row blocks form one pool of rayon tasks, so a decode
/// step wakes the threads once for eight experts' gate and up projections rather than
/// sixteen times, and nothing is allocated. Output ranges must come in group order and
/// not overlap (checked; it is what lets the tasks write `out` without locks).
pub fn matmul_grouped<'w>(
    matrix: impl Fn(usize) -> Matrix<'w> + Sync,
    groups: &[Group],
    xs: &[f32],
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    let avx512 = use_avx512();
    #[cfg(not(target_arch = "x86_64"))]
    let avx512 = false;
    grouped_with(matrix, groups, xs, out, avx512);
}
// ANCHOR_END: matmul_grouped

fn grouped_with<'w>(
    matrix: impl Fn(usize) -> Matrix<'w> + Sync,
    groups: &[Group],
    xs: &[f32],
    out: &mut [f32],
    avx512: bool,
) {
    let Some(first) = groups.first() else { return };
    let (rows, cols) = (matrix(first.matrix).rows, matrix(first.matrix).cols);
    assert!(
        cols > 0 && xs.len().is_multiple_of(cols),
        "matmul: input length"
    );
    assert!(
        rows > 0 && out.len().is_multiple_of(rows),
        "matmul: output length"
    );
    let (in_rows, out_rows) = (xs.len() / cols, out.len() / rows);
    let mut end = 0;
    let mut work_total = 0;
    for (i, g) in groups.iter().enumerate() {
        assert!(g.first_in + g.n <= in_rows, "matmul: group {i} input rows");
        assert!(
            g.first_out >= end && g.first_out + g.n <= out_rows,
            "matmul: group {i} output rows overlap or overrun"
        );
        if g.n > 0 {
            end = g.first_out + g.n;
        }
        work_total += g.n * rows * cols;
    }
    // Groups of at least GEMM_MIN_TOKENS rows take the outer-product kernel: their inputs
    // are transposed once here into panels of PANEL tokens, shared by every row block. The
    // panel buffer is the calling thread's, reused across calls (a fresh one only if that
    // thread is already inside a grouped matmul).
    #[cfg(target_arch = "x86_64")]
    let min_tokens = match (
        avx512 && is_x86_feature_detected!("avx512f"),
        matrix(first.matrix).data,
    ) {
        (false, _) => usize::MAX,
        (true, WeightData::F32(_)) => GEMM_MIN_TOKENS_F32,
        (true, _) => GEMM_MIN_TOKENS,
    };
    #[cfg(target_arch = "x86_64")]
    PANELS.with(|cell| {
        let mut mine = cell.try_borrow_mut().ok();
        let mut fresh = Panels::default();
        let panels = mine.as_deref_mut().unwrap_or(&mut fresh);
        pack_panels(panels, groups, xs, cols, min_tokens);
        run_jobs(&matrix, groups, xs, out, avx512, work_total, panels);
    });
    #[cfg(not(target_arch = "x86_64"))]
    run_jobs(
        &matrix,
        groups,
        xs,
        out,
        avx512,
        work_total,
        &Panels::default(),
    );
}

/// The row-block tasks of [`grouped_with`], after its checks.
fn run_jobs<'w>(
    matrix: &(impl Fn(usize) -> Matrix<'w> + Sync),
    groups: &[Group],
    xs: &[f32],
    out: &mut [f32],
    avx512: bool,
    work_total: usize,
    panels: &Panels,
) {
    let (rows, cols) = (matrix(groups[0].matrix).rows, matrix(groups[0].matrix).cols);
    let blocks = rows.div_ceil(ROW_BLOCK);
    let dst = OutPtr(out.as_mut_ptr());
    let work = |job: usize| {
        let g = groups[job / blocks];
        if g.n == 0 {
            return;
        }
        let w = matrix(g.matrix);
        assert!(
            w.rows == rows && w.cols == cols,
            "matmul: matrix {} shape",
            g.matrix
        );
        let r0 = job % blocks * ROW_BLOCK;
        let r1 = (r0 + ROW_BLOCK).min(rows);
        let x = &xs[g.first_in * cols..(g.first_in + g.n) * cols];
        let o = Out {
            // The group's output rows start `first_out · rows` floats into `out` (checked
            // above to lie inside it), so this is the address `add` would give.
            ptr: dst.offset(g.first_out * rows),
            stride: rows,
            r0,
        };
        let span = r0 * cols..r1 * cols;
        #[cfg(target_arch = "x86_64")]
        if let Some(first) = panels.first.get(job / blocks).copied().flatten() {
            // SAFETY: AVX-512F is available (`panels` is only filled when `grouped_with`
            // detected it); the panels of this group hold `g.n` tokens padded to whole
            // panels of `cols` columns; `o` may write rows r0..r1 for tokens < g.n (as for
            // the tiles).
            unsafe { gemm_block(&w, r0..r1, &panels.data[first..], g.n, o) };
            return;
        }
        match w.data {
            WeightData::F32(d) => tile_dispatch(&d[span], cols, x, g.n, o, avx512),
            WeightData::Bf16(d) => tile_dispatch(&d[span], cols, x, g.n, o, avx512),
            WeightData::F16(d) => tile_dispatch(&d[span], cols, x, g.n, o, avx512),
        }
    };
    let jobs = groups.len() * blocks;
    if work_total < 1 << 15 {
        // Too small to be worth waking the pool (tiny test models).
        (0..jobs).for_each(work);
    } else {
        use rayon::prelude::*;
        (0..jobs).into_par_iter().for_each(work);
    }
}

/// Groups with at least this many input rows use [`gemm_block`] (below it, the register
/// tiles' dot products waste less than the panels' padding and the widening cost; f32
/// weights, twice the bytes per row, favour the panels sooner). Measured on a 768 × 2048
/// matrix, one thread.
const GEMM_MIN_TOKENS: usize = 40;
const GEMM_MIN_TOKENS_F32: usize = 24;
/// Tokens per input panel: two 16-lane vectors.
const PANEL: usize = 32;

/// Inputs transposed into panels: for each group that takes the outer-product kernel,
/// `ceil(n / PANEL)` panels of `[cols][PANEL]` floats (zero-padded), starting at
/// `first[g]` in `data`.
#[derive(Default)]
struct Panels {
    data: Vec<f32>,
    first: Vec<Option<usize>>,
}

/// Fills `p` with the panels of the groups with at least `min_tokens` rows, in parallel,
/// reusing its buffers (a decode step, one token per group, returns at the first check).
#[cfg(target_arch = "x86_64")]
fn pack_panels(p: &mut Panels, groups: &[Group], xs: &[f32], cols: usize, min_tokens: usize) {
    use rayon::prelude::*;
    p.first.clear();
    p.data.clear();
    if groups.iter().all(|g| g.n < min_tokens) {
        return;
    }
    // (group, panel) of each PANEL·cols chunk of `data`, in order.
    let mut chunks = Vec::new();
    for g in groups {
        if g.n >= min_tokens {
            p.first.push(Some(chunks.len() * PANEL * cols));
            chunks.extend((0..g.n.div_ceil(PANEL)).map(|k| (*g, k)));
        } else {
            p.first.push(None);
        }
    }
    p.data.resize(chunks.len() * PANEL * cols, 0.0);
    p.data
        .par_chunks_mut(PANEL * cols)
        .zip(&chunks)
        .for_each(|(panel, &(g, k))| {
            let tokens = k * PANEL..((k + 1) * PANEL).min(g.n);
            if tokens.len() < PANEL {
                panel.fill(0.0); // the padding of a last, partial panel
            }
            for j in tokens {
                let x = &xs[(g.first_in + j) * cols..(g.first_in + j + 1) * cols];
                for (c, &v) in x.iter().enumerate() {
                    panel[c * PANEL + j % PANEL] = v;
                }
            }
        });
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// The input panels of the grouped matmuls this thread calls.
    static PANELS: std::cell::RefCell<Panels> = std::cell::RefCell::new(Panels::default());
    /// Weight rows widened to f32 for [`gemm_block`], one buffer per thread (grown once).
    static WIDE_ROWS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

// ANCHOR: gemm_block
/// Rows `r` of `w` against `n` tokens held in panels, as outer products. The rows are
/// widened to f32 once per call; a step of the 8 × 32 register tile (16 accumulators)
/// broadcasts one weight of each of 8 rows and loads 32 inputs of one column: every load
/// feeds 2–8 FMAs. Columns go in blocks of KC, with the accumulators of the whole row
/// block parked in `acc` between blocks, so the input panel's block (KC·32 floats) and the
/// widened rows' block stay in L1 while all 4 micro-panels use them — the dot-product
/// tiles instead stream whole rows through L1 for 4 FMAs a load. (12-row tiles with
/// 48-row blocks measured no faster here.)
///
/// # Safety
/// AVX-512F must be available; `panels` must hold `ceil(n / PANEL)` panels of
/// `w.cols` columns; `out` may write rows `r` (of this task's block) for tokens `< n`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gemm_block(w: &Matrix, r: std::ops::Range<usize>, panels: &[f32], n: usize, out: Out) {
    use std::arch::x86_64::*;
    const MR: usize = 8;
    const KC: usize = 128;
    let cols = w.cols;
    let nr = r.len();
    let micro = nr.div_ceil(MR);
    WIDE_ROWS.with_borrow_mut(|wide| {
        // Widen: row r.start + i → wide[i·stride ..][..cols]; the stride is padded past a
        // multiple of 4 KiB so the 8 rows a tile reads do not share one L1 set.
        let stride = cols + 16;
        wide.clear();
        wide.resize(micro * MR * stride, 0.0);
        for (i, row) in wide.chunks_exact_mut(stride).take(nr).enumerate() {
            w.row_slice_into(r.start + i, 0, &mut row[..cols]);
        }
        let wp = wide.as_ptr();
        let mut acc = [[_mm512_setzero_ps(); 2]; ROW_BLOCK.div_ceil(MR) * MR];
        for p in 0..n.div_ceil(PANEL) {
            let xp = panels[p * PANEL * cols..].as_ptr();
            let tokens = (n - p * PANEL).min(PANEL);
            acc.fill([_mm512_setzero_ps(); 2]);
            for k0 in (0..cols).step_by(KC) {
                for m in 0..micro {
                    let mut a = [[_mm512_setzero_ps(); 2]; MR];
                    a.copy_from_slice(&acc[m * MR..(m + 1) * MR]);
                    for c in k0..(k0 + KC).min(cols) {
                        // SAFETY: the panel holds PANEL floats for each of `cols` columns,
                        // and rows m·MR .. m·MR + MR of `wide` exist (`micro · MR` rows).
                        let (x0, x1, wc) = unsafe {
                            (
                                _mm512_loadu_ps(xp.add(c * PANEL)),
                                _mm512_loadu_ps(xp.add(c * PANEL + 16)),
                                wp.add(m * MR * stride + c),
                            )
                        };
                        for (i, ai) in a.iter_mut().enumerate() {
                            // SAFETY: row m·MR + i < micro·MR rows of `stride` floats, c < cols.
                            let b = _mm512_set1_ps(unsafe { *wc.add(i * stride) });
                            ai[0] = _mm512_fmadd_ps(b, x0, ai[0]);
                            ai[1] = _mm512_fmadd_ps(b, x1, ai[1]);
                        }
                    }
                    acc[m * MR..(m + 1) * MR].copy_from_slice(&a);
                }
            }
            for (i, a) in acc.iter().enumerate().take(nr) {
                let mut lanes = [0.0f32; PANEL];
                // SAFETY: `lanes` holds the 32 floats the two stores write.
                unsafe {
                    _mm512_storeu_ps(lanes.as_mut_ptr(), a[0]);
                    _mm512_storeu_ps(lanes.as_mut_ptr().add(16), a[1]);
                }
                for (j, &v) in lanes.iter().enumerate().take(tokens) {
                    // SAFETY: row i is in this task's block and token p·PANEL+j < n, the
                    // caller's contract, which is `Out::set`'s.
                    unsafe { out.set(p * PANEL + j, i, v) };
                }
            }
        }
    });
}
// ANCHOR_END: gemm_block

/// The output pointer shared by the tasks of one [`matmul_grouped`].
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the pointer is only written through `Out::set`, whose contract makes the tasks of
// one matmul write disjoint elements (each owns one row block of one group, and the groups'
// output rows were checked disjoint), and `matmul_grouped` holds
// the `&mut [f32]` it came from until every task has finished.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer `n` floats further on (a method, so closures capture the whole `Sync`
    /// wrapper rather than its raw field).
    fn offset(self, n: usize) -> OutPtr {
        OutPtr(self.0.wrapping_add(n))
    }
}

/// One task's view of `out` (`[n, stride]`): it owns rows `r0 .. r0 + ROW_BLOCK`.
#[derive(Clone, Copy)]
struct Out {
    ptr: OutPtr,
    stride: usize,
    r0: usize,
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
}

/// A weight element the fast kernels can widen to f32.
trait Elem: Copy + Sync {
    fn widen(self) -> f32;
    /// Eight elements starting at `p`, widened.
    ///
    /// # Safety
    /// `p..p+8` must be readable and the CPU must support AVX2 and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
    /// Sixteen elements starting at `p`, widened.
    ///
    /// # Safety
    /// `p..p+16` must be readable and the CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;
}

impl Elem for f32 {
    fn widen(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller guarantees 8 readable f32 at p and AVX support.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller guarantees 16 readable f32 at p and AVX-512F support.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }
}

impl Elem for half::bf16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const half::bf16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // bf16 is the top half of an f32: zero-extend each 16-bit lane to 32 bits and shift
        // it up 16 — exact, the same value `to_f32` gives.
        // SAFETY: the caller guarantees 8 readable bf16 (16 bytes) at p and AVX2 support.
        unsafe {
            let h = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const half::bf16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // The same exact widening as `load8`, sixteen lanes.
        // SAFETY: the caller guarantees 16 readable bf16 (32 bytes) at p and AVX-512F.
        unsafe {
            let h = _mm256_loadu_si256(p as *const __m256i);
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
        }
    }
}

impl Elem for half::f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const half::f16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 8 readable f16 (16 bytes) at p and F16C support;
        // vcvtph2ps converts exactly.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const half::f16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 16 readable f16 (32 bytes) at p and AVX-512F.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
}

/// `out[t, r0 + r] = w[r]·xs[t]` for the rows of `w` (`[rows ≤ ROW_BLOCK, cols]`).
fn tile_dispatch<E: Elem>(w: &[E], cols: usize, xs: &[f32], n: usize, out: Out, avx512: bool) {
    #[cfg(target_arch = "x86_64")]
    if avx512 && cols >= 16 && is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected just above.
        unsafe { tiles_avx512(w, cols, xs, n, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if cols >= 8
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
    {
        // SAFETY: the three features the function is compiled with were detected above.
        unsafe { tiles_avx2(w, cols, xs, n, out) };
        return;
    }
    tiles_portable(w, cols, xs, n, out);
}

/// Portable fallback: one widened dot product per (row, token).
fn tiles_portable<E: Elem>(w: &[E], cols: usize, xs: &[f32], n: usize, out: Out) {
    let mut row = vec![0.0f32; cols];
    for (r, wr) in w.chunks_exact(cols).enumerate() {
        for (v, e) in row.iter_mut().zip(wr) {
            *v = e.widen();
        }
        for t in 0..n {
            let x = &xs[t * cols..(t + 1) * cols];
            // SAFETY: r < rows of this block (≤ ROW_BLOCK, inside `stride`) and t < n.
            unsafe { out.set(t, r, dot(&row, x)) };
        }
    }
}

/// Rows in groups of 3 (4 when there is a single token) and tokens in groups of 3, each
/// group one register tile: 3×3 accumulators + 3 inputs + 1 weight vector fit the 16 ymm
/// registers without spilling.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn tiles_avx2<E: Elem>(w: &[E], cols: usize, xs: &[f32], n: usize, out: Out) {
    let rows = w.len() / cols;
    let rstep = if n == 1 { 4 } else { 3 };
    let mut t0 = 0;
    while t0 < n {
        let t_end = (t0 + TOKEN_BLOCK).min(n);
        let mut r = 0;
        while r < rows {
            let rn = (rows - r).min(rstep);
            let mut t = t0;
            while t < t_end {
                let tn = (t_end - t).min(3);
                // SAFETY: rows r..r+rn ≤ rows and tokens t..t+tn ≤ n, so every weight row
                // and input row the tile reads lies in `w` and `xs`, and it writes only
                // rows of this block for tokens < n (the contract of `Out::set`); the CPU
                // features were checked by this function's caller.
                unsafe {
                    match (rn, tn) {
                        (4, _) => tile::<E, 4, 1>(w, cols, xs, out, r, t),
                        (3, 3) => tile::<E, 3, 3>(w, cols, xs, out, r, t),
                        (3, 2) => tile::<E, 3, 2>(w, cols, xs, out, r, t),
                        (3, 1) => tile::<E, 3, 1>(w, cols, xs, out, r, t),
                        (2, 3) => tile::<E, 2, 3>(w, cols, xs, out, r, t),
                        (2, 2) => tile::<E, 2, 2>(w, cols, xs, out, r, t),
                        (2, 1) => tile::<E, 2, 1>(w, cols, xs, out, r, t),
                        (1, 3) => tile::<E, 1, 3>(w, cols, xs, out, r, t),
                        (1, 2) => tile::<E, 1, 2>(w, cols, xs, out, r, t),
                        _ => tile::<E, 1, 1>(w, cols, xs, out, r, t),
                    }
                }
                t += tn;
            }
            r += rn;
        }
        t0 = t_end;
    }
}

// ANCHOR: tile
/// One R×T register tile: R weight rows against T token rows, 8 columns per step, R·T
/// independent accumulators; the `cols % 8` tail is summed in scalar.
///
/// # Safety
/// Rows `r..r+R` of `w` (`[rows, cols]`, rows of this task's block) and tokens `t..t+T`
/// of `xs` must exist, and the CPU must support AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<E: Elem, const R: usize, const T: usize>(
    w: &[E],
    cols: usize,
    xs: &[f32],
    out: Out,
    r: usize,
    t: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let main = cols / 8 * 8;
    let wp = w.as_ptr();
    let xp = xs.as_ptr();
    let line = 64 / std::mem::size_of::<E>(); // elements per cache line
    let mut c = 0;
    while c < main {
        let mut xv = [_mm256_setzero_ps(); T];
        for (j, v) in xv.iter_mut().enumerate() {
            // SAFETY: token t+j exists and c+8 ≤ cols, so the 8 floats lie inside xs.
            *v = unsafe { _mm256_loadu_ps(xp.add((t + j) * cols + c)) };
        }
        if c % line == 0 {
            // Each weight row is its own 4 KiB page in the big matrices and the hardware
            // prefetcher stops at page boundaries, so fetch the next tile's rows ahead.
            for i in 0..R {
                let p = wp.wrapping_add((r + R + i) * cols + c) as *const i8;
                // Prefetching is a hint that never faults, whatever the address;
                // `wrapping_add` keeps the address computation itself defined.
                _mm_prefetch::<_MM_HINT_T0>(p);
            }
        }
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: row r+i exists and c+8 ≤ cols, so the 8 elements lie inside w.
            let wv = unsafe { E::load8(wp.add((r + i) * cols + c)) };
            for (aj, xj) in a.iter_mut().zip(&xv) {
                *aj = _mm256_fmadd_ps(wv, *xj, *aj);
            }
        }
        c += 8;
    }
    for (i, a) in acc.iter().enumerate() {
        let wr = &w[(r + i) * cols..(r + i + 1) * cols];
        for (j, v) in a.iter().enumerate() {
            let x = &xs[(t + j) * cols..(t + j + 1) * cols];
            let mut lanes = [0.0f32; 8];
            // SAFETY: `lanes` holds exactly the 8 floats an unaligned 256-bit store writes.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), *v) };
            let mut s = (lanes[0] + lanes[4])
                + (lanes[1] + lanes[5])
                + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
            for k in main..cols {
                s += wr[k].widen() * x[k];
            }
            // SAFETY: row r+i is in this task's block and token t+j < n (the caller's
            // contract), which is `Out::set`'s.
            unsafe { out.set(t + j, r + i, s) };
        }
    }
}
// ANCHOR_END: tile

/// Whether the matmul uses its AVX-512 tiles: when the CPU has AVX-512F and the
/// environment does not set `ANATOMY_NO_AVX512` (to measure the AVX2 path on such a CPU).
#[cfg(target_arch = "x86_64")]
pub fn use_avx512() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        is_x86_feature_detected!("avx512f") && std::env::var_os("ANATOMY_NO_AVX512").is_none()
    })
}

/// [`tiles_avx2`] with 16-lane registers: 32 of them hold a 4×4 tile (16 accumulators,
/// 4 weight vectors, 1 input vector) without spilling. (3×8 tiles, which share each
/// widened bf16 weight vector among 8 FMAs, measured no faster on prefill: the inputs'
/// trips to L2, not the widening, set the pace.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn tiles_avx512<E: Elem>(w: &[E], cols: usize, xs: &[f32], n: usize, out: Out) {
    let rows = w.len() / cols;
    let mut t0 = 0;
    while t0 < n {
        let t_end = (t0 + TOKEN_BLOCK).min(n);
        let mut r = 0;
        while r < rows {
            let rn = (rows - r).min(4);
            let mut t = t0;
            while t < t_end {
                let tn = (t_end - t).min(4);
                // SAFETY: as in `tiles_avx2`: the rows and tokens of the tile exist, it
                // writes only this block's rows for tokens < n, and AVX-512F was checked
                // by this function's caller.
                unsafe {
                    match (rn, tn) {
                        (4, 4) => tile512::<E, 4, 4>(w, cols, xs, out, r, t),
                        (4, 3) => tile512::<E, 4, 3>(w, cols, xs, out, r, t),
                        (4, 2) => tile512::<E, 4, 2>(w, cols, xs, out, r, t),
                        (4, 1) => tile512::<E, 4, 1>(w, cols, xs, out, r, t),
                        (3, 4) => tile512::<E, 3, 4>(w, cols, xs, out, r, t),
                        (3, 3) => tile512::<E, 3, 3>(w, cols, xs, out, r, t),
                        (3, 2) => tile512::<E, 3, 2>(w, cols, xs, out, r, t),
                        (3, 1) => tile512::<E, 3, 1>(w, cols, xs, out, r, t),
                        (2, 4) => tile512::<E, 2, 4>(w, cols, xs, out, r, t),
                        (2, 3) => tile512::<E, 2, 3>(w, cols, xs, out, r, t),
                        (2, 2) => tile512::<E, 2, 2>(w, cols, xs, out, r, t),
                        (2, 1) => tile512::<E, 2, 1>(w, cols, xs, out, r, t),
                        (1, 4) => tile512::<E, 1, 4>(w, cols, xs, out, r, t),
                        (1, 3) => tile512::<E, 1, 3>(w, cols, xs, out, r, t),
                        (1, 2) => tile512::<E, 1, 2>(w, cols, xs, out, r, t),
                        _ => tile512::<E, 1, 1>(w, cols, xs, out, r, t),
                    }
                }
                t += tn;
            }
            r += rn;
        }
        t0 = t_end;
    }
}

/// [`tile`] with 16 columns per step.
///
/// # Safety
/// As for [`tile`], with AVX-512F instead of AVX2/FMA/F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile512<E: Elem, const R: usize, const T: usize>(
    w: &[E],
    cols: usize,
    xs: &[f32],
    out: Out,
    r: usize,
    t: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    let main = cols / 16 * 16;
    let wp = w.as_ptr();
    let xp = xs.as_ptr();
    let line = 64 / std::mem::size_of::<E>();
    let mut c = 0;
    while c < main {
        if c % line == 0 {
            for i in 0..R {
                let p = wp.wrapping_add((r + R + i) * cols + c) as *const i8;
                // A prefetch never faults; `wrapping_add` keeps the address defined.
                _mm_prefetch::<_MM_HINT_T0>(p);
            }
        }
        let mut wv = [_mm512_setzero_ps(); R];
        for (i, v) in wv.iter_mut().enumerate() {
            // SAFETY: row r+i exists and c+16 ≤ cols, so the 16 elements lie inside w.
            *v = unsafe { E::load16(wp.add((r + i) * cols + c)) };
        }
        for j in 0..T {
            // SAFETY: token t+j exists and c+16 ≤ cols, so the 16 floats lie inside xs.
            let xj = unsafe { _mm512_loadu_ps(xp.add((t + j) * cols + c)) };
            for (a, wi) in acc.iter_mut().zip(&wv) {
                a[j] = _mm512_fmadd_ps(*wi, xj, a[j]);
            }
        }
        c += 16;
    }
    for (i, a) in acc.iter().enumerate() {
        let wr = &w[(r + i) * cols..(r + i + 1) * cols];
        for (j, v) in a.iter().enumerate() {
            let x = &xs[(t + j) * cols..(t + j + 1) * cols];
            let mut s = _mm512_reduce_add_ps(*v);
            for k in main..cols {
                s += wr[k].widen() * x[k];
            }
            // SAFETY: row r+i is in this task's block and token t+j < n.
            unsafe { out.set(t + j, r + i, s) };
        }
    }
}

#[cfg(test)]
mod fast_tests {
    use super::*;

    fn bound(w: &[f32], x: &[f32]) -> f32 {
        let abs: f32 = w.iter().zip(x).map(|(a, b)| (a * b).abs()).sum();
        2.0 * w.len() as f32 * f32::EPSILON * abs
    }

    /// `matmul` equals the reference `matvec` token by token, for every dtype and for
    /// shapes that exercise every tile size and the scalar column tail.
    #[test]
    fn matmul_equals_reference_matvec() {
        for &(rows, cols, n) in &[
            (1, 3, 1),
            (7, 8, 1),
            (37, 24, 5),
            (70, 131, 9),
            (65, 2048, 67),
            // The panel kernel: columns not a multiple of 16 or of its column block,
            // partial panels, f32's lower threshold (24) and the others' (40).
            (33, 150, 45),
            (50, 16, 24),
            (9, 300, 40),
        ] {
            let wf: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
                .collect();
            let wb: Vec<half::bf16> = wf.iter().map(|&v| half::bf16::from_f32(v)).collect();
            let wh: Vec<half::f16> = wf.iter().map(|&v| half::f16::from_f32(v)).collect();
            let xs: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
                .collect();
            for m in [
                Matrix::f32(&wf, rows, cols),
                Matrix::bf16(&wb, rows, cols),
                Matrix::f16(&wh, rows, cols),
            ] {
                for avx512 in [false, true] {
                    let mut fast = vec![0.0f32; n * rows];
                    m.matmul_with(&xs, &mut fast, avx512);
                    let mut row = vec![0.0f32; cols];
                    for t in 0..n {
                        let x = &xs[t * cols..(t + 1) * cols];
                        let mut reference = vec![0.0f32; rows];
                        m.matvec(x, &mut reference);
                        for r in 0..rows {
                            m.row_into(r, &mut row);
                            let (a, b) = (fast[t * rows + r], reference[r]);
                            assert!(
                                (a - b).abs() <= bound(&row, x),
                                "{rows}x{cols} n={n} [{t},{r}]: {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The fast attention equals the reference for grouped heads, a sliding span and a
    /// head dimension the AVX-512 path takes (128) and one it does not (24).
    #[test]
    fn attend_equals_reference() {
        let val = |s: usize| ((s * 7919 % 1009) as f32 - 504.0) / 300.0;
        for (d, heads, kv_heads) in [(128, 4, 2), (24, 2, 3), (32, 1, 1)] {
            let (stride, positions) = (kv_heads * d, 37);
            let keys: Vec<f32> = (0..positions * stride).map(|s| val(s + 3)).collect();
            let values: Vec<f32> = (0..positions * stride).map(|s| val(s * 5 + 1)).collect();
            let q: Vec<f32> = (0..heads * d).map(|s| val(s * 11 + 7)).collect();
            for (g, span) in [(0, 0..37), (kv_heads - 1, 9..30), (0, 5..6)] {
                let kv = KvHead {
                    keys: &keys,
                    values: &values,
                    stride,
                    offset: g * d,
                };
                let scale = (d as f32).powf(-0.5);
                let (mut a, mut b) = (vec![0.0; heads * d], vec![0.0; heads * d]);
                attend_reference(&q, d, kv, span.clone(), scale, &mut Vec::new(), &mut a);
                attend(&q, d, kv, span.clone(), scale, &mut Vec::new(), &mut b);
                let scale_out = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                for (x, y) in a.iter().zip(&b) {
                    assert!((x - y).abs() <= 1e-5 * scale_out, "d {d}: {x} vs {y}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Attention for one position (chapter 9's inner loop, chapter 10's fast form).
// ---------------------------------------------------------------------------------------

/// Where one KV head's keys and values sit in the cache: position `j`'s vector is
/// `data[j · stride + offset ..][..head_dim]`.
#[derive(Clone, Copy, Debug)]
pub struct KvHead<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub stride: usize,
    pub offset: usize,
}

// ANCHOR: attend
/// `out_h = Σ_j softmax_j(q_h · k_j · scale) · v_j` over the positions `span`, for the
/// query heads `q` (`[heads, d]`) that share the KV head `kv` (grouped-query attention);
/// `out` is `[heads, d]` and `scores` scratch. The clear version; [`attend`] is the fast
/// one, and a test pins the two equal.
pub fn attend_reference(
    q: &[f32],
    d: usize,
    kv: KvHead,
    span: std::ops::Range<usize>,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let at = |j: usize| j * kv.stride + kv.offset..j * kv.stride + kv.offset + d;
    scores.resize(span.len(), 0.0);
    for (qh, o) in q.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        for (j, s) in span.clone().zip(scores.iter_mut()) {
            *s = dot(qh, &kv.keys[at(j)]) * scale;
        }
        softmax_in_place(scores);
        o.fill(0.0);
        for (j, &p) in span.clone().zip(scores.iter()) {
            for (oi, vi) in o.iter_mut().zip(&kv.values[at(j)]) {
                *oi += p * vi;
            }
        }
    }
}
// ANCHOR_END: attend

/// [`attend_reference`] with AVX-512 FMAs when the CPU has them and `d` is a multiple of
/// 16: each key row is read once for all the heads of the group, the scores of all heads
/// are kept (`scores` is `[heads, span]`), and each head's weighted values are summed 128
/// columns at a time in registers. Otherwise the reference runs.
pub fn attend(
    q: &[f32],
    d: usize,
    kv: KvHead,
    span: std::ops::Range<usize>,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    assert!(
        d > 0 && q.len() == out.len() && q.len().is_multiple_of(d),
        "attend: shapes"
    );
    let last = span.end.saturating_sub(1) * kv.stride + kv.offset + d;
    assert!(
        span.is_empty() || (last <= kv.keys.len() && last <= kv.values.len()),
        "attend: positions past the cache"
    );
    #[cfg(target_arch = "x86_64")]
    if d.is_multiple_of(16) && use_avx512() {
        scores.resize(q.len() / d * span.len(), 0.0);
        // SAFETY: AVX-512F is available (`use_avx512`), `d` is a multiple of 16, and the
        // asserts above keep every row the kernel reads inside `keys` and `values`.
        unsafe { attend_avx512(q, d, kv, span, scale, scores, out) };
        return;
    }
    attend_reference(q, d, kv, span, scale, scores, out);
}

/// # Safety
/// AVX-512F must be available, `d % 16 == 0`, `scores.len() == heads · span.len()`, and
/// rows `span` of `kv` must lie inside `kv.keys` and `kv.values`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn attend_avx512(
    q: &[f32],
    d: usize,
    kv: KvHead,
    span: std::ops::Range<usize>,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let len = span.len();
    let (kp, vp) = (kv.keys.as_ptr(), kv.values.as_ptr());
    // Scores: every head against key j, the key read once.
    for (jj, j) in span.clone().enumerate() {
        // SAFETY: row j lies inside `keys` (the caller's contract).
        let k = unsafe { kp.add(j * kv.stride + kv.offset) };
        for (h, qh) in q.chunks_exact(d).enumerate() {
            let mut acc = [_mm512_setzero_ps(); 2];
            for c in (0..d).step_by(32) {
                for (u, a) in acc.iter_mut().enumerate() {
                    let cc = c + 16 * u;
                    if cc < d {
                        // SAFETY: cc + 16 ≤ d, inside row j of keys and head h of q.
                        let (kv16, qv16) = unsafe {
                            (
                                _mm512_loadu_ps(k.add(cc)),
                                _mm512_loadu_ps(qh.as_ptr().add(cc)),
                            )
                        };
                        *a = _mm512_fmadd_ps(kv16, qv16, *a);
                    }
                }
            }
            scores[h * len + jj] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1])) * scale;
        }
    }
    for s in scores.chunks_exact_mut(len.max(1)) {
        softmax_in_place(s);
    }
    // Weighted values: up to 128 columns of one head's output in 8 registers, positions
    // in order (the reference's summation order per element).
    for (h, o) in out.chunks_exact_mut(d).enumerate() {
        let p = &scores[h * len..(h + 1) * len];
        for c0 in (0..d).step_by(128) {
            let nv = ((d - c0) / 16).min(8);
            let mut acc = [_mm512_setzero_ps(); 8];
            for (jj, j) in span.clone().enumerate() {
                let pj = _mm512_set1_ps(p[jj]);
                // SAFETY: row j lies inside `values` (the caller's contract).
                let v = unsafe { vp.add(j * kv.stride + kv.offset + c0) };
                for (u, a) in acc.iter_mut().enumerate().take(nv) {
                    // SAFETY: c0 + 16u + 16 ≤ d, inside row j.
                    *a = _mm512_fmadd_ps(pj, unsafe { _mm512_loadu_ps(v.add(16 * u)) }, *a);
                }
            }
            for (u, a) in acc.iter().enumerate().take(nv) {
                // SAFETY: c0 + 16u + 16 ≤ d = o.len().
                unsafe { _mm512_storeu_ps(o.as_mut_ptr().add(c0 + 16 * u), *a) };
            }
        }
    }
}
