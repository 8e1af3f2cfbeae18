//! The batched and grouped matmuls (chapter 10; the engine of chapter 9 and the MoE layer
//! of chapter 5 call them). The reference [`Matrix::matvec`] stays the definition;
//! [`Matrix::matmul`] and [`matmul_grouped`] compute the same products for a batch of
//! token rows, in parallel over output rows (rayon). The inner kernels are the x86 register
//! tiles and outer-product kernel of `x86.rs`, chosen at run time, with a portable
//! fallback here. Each output is one dot product over `cols`, summed in a different order
//! than [`dot`]; a test pins the two equal within the summation error bound
//! `2·cols·ε·Σ|w·x|`.

use super::bf16::{self, Bf16Acts};
use super::dispatch::{self, GroupedKernel, GroupedPlan};
use super::policy::current;
use super::quant::tiles::{self as quant_tiles, MAX_ROWS, MAX_TILE_TOKENS};
use super::quant::{self, ActRow, QuantizedRows};
use super::{DECODE_ROW_BLOCK, Matrix, Out, OutPtr, PANEL, ROW_BLOCK, WeightData, dot, x86};
use std::ops::Range;

mod panels;
use panels::{PANELS, Panels, pack_panels};

/// One member of a [`matmul_grouped`] call: matrix number `matrix` applied to `n`
/// consecutive input rows from row `first_in`, written to `n` output rows from `first_out`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub matrix: usize,
    pub first_in: usize,
    pub n: usize,
    pub first_out: usize,
}

impl Matrix<'_> {
    /// `out[t, r] = Σ_c W[r, c] · xs[t, c]` for `n = xs.len() / cols` token rows: the
    /// batched, parallel form of [`Matrix::matvec`] (`out` is `[n, rows]`, row-major).
    /// Each weight row block is read from memory once per call, whatever `n` is.
    pub fn matmul(&self, xs: &[f32], out: &mut [f32]) {
        self.matmul_with(xs, out, x86::use_avx512());
    }

    /// [`Matrix::matmul`] on the AVX2 (or portable) tiles whatever the CPU has, so the
    /// summation order, hence every bit of the result, is the same on AVX2 and AVX-512
    /// CPUs (the trainer's forward uses it: a run reproduces across machines).
    pub fn matmul_without_avx512(&self, xs: &[f32], out: &mut [f32]) {
        self.matmul_with(xs, out, false);
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
    grouped_with(matrix, groups, xs, out, x86::use_avx512());
}

/// The grouped matmul with the AVX-512 tiles allowed or not: checks the groups, takes the
/// kernel [`dispatch::select`] names for them, prepares its inputs once in the calling
/// thread's reused buffers (a fresh one only if that thread is already inside a grouped
/// matmul) and splits the work into row-block jobs.
fn grouped_with<'w>(
    matrix: impl Fn(usize) -> Matrix<'w> + Sync,
    groups: &[Group],
    xs: &[f32],
    out: &mut [f32],
    avx512: bool,
) {
    let Some(first) = groups.first() else { return };
    let w = matrix(first.matrix);
    let work_total = check_groups(groups, w.rows, w.cols, xs.len(), out.len());
    let tokens = groups.iter().map(|g| g.n);
    let plan = dispatch::select(w.data.ggml_type(), &current(), avx512, w.cols, tokens);
    let panel_groups = || groups.iter().map(|g| (g.first_in, g.n));
    match plan.kernel {
        GroupedKernel::NativeBf16(mode) => with_reused(&BF16_ACTS, |acts| {
            acts.fill(mode, xs, w.cols, panel_groups(), plan.panel_min_tokens);
            run_jobs(
                &matrix,
                groups,
                xs,
                out,
                &Jobs::new(plan, work_total, &Panels::default(), None, Some(acts)),
            );
        }),
        GroupedKernel::Int8 {
            block, max_tokens, ..
        } => with_reused(&PANELS, |panels| {
            pack_panels(panels, groups, xs, w.cols, plan.panel_min_tokens);
            with_reused(&QUANT_ACTS, |acts| {
                if groups.iter().all(|g| g.n <= max_tokens) {
                    acts.quantize(xs, w.cols, block);
                } else {
                    // Only the rows of the groups the int8 path takes (the rest take the
                    // f32 kernels): marked once, then quantised in parallel.
                    with_reused(&INT8_ROWS, |rows| {
                        rows.clear();
                        rows.resize(xs.len() / w.cols, false);
                        for g in groups.iter().filter(|g| g.n <= max_tokens) {
                            rows[g.first_in..g.first_in + g.n].fill(true);
                        }
                        acts.quantize_where(xs, w.cols, block, |t| rows[t]);
                    });
                }
                run_jobs(
                    &matrix,
                    groups,
                    xs,
                    out,
                    &Jobs::new(plan, work_total, panels, Some(acts), None),
                );
            })
        }),
        GroupedKernel::F32Tiles | GroupedKernel::Portable => with_reused(&PANELS, |panels| {
            pack_panels(panels, groups, xs, w.cols, plan.panel_min_tokens);
            run_jobs(
                &matrix,
                groups,
                xs,
                out,
                &Jobs::new(plan, work_total, panels, None, None),
            );
        }),
    }
}

/// Checks that every group lies inside `xs` (`[·, cols]`) and `out` (`[·, rows]`) and that
/// the output ranges come in order without overlap; returns the multiply-adds in all.
fn check_groups(groups: &[Group], rows: usize, cols: usize, xs: usize, out: usize) -> usize {
    assert!(cols > 0 && xs.is_multiple_of(cols), "matmul: input length");
    assert!(
        rows > 0 && out.is_multiple_of(rows),
        "matmul: output length"
    );
    let (in_rows, out_rows) = (xs / cols, out / rows);
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
    work_total
}

/// Runs `f` on this thread's buffer in `key`, or on a fresh one if a grouped matmul of
/// this thread already holds it.
fn with_reused<T: Default + 'static, R>(
    key: &'static std::thread::LocalKey<std::cell::RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    key.with(|cell| {
        let mut mine = cell.try_borrow_mut().ok();
        let mut fresh = T::default();
        f(mine.as_deref_mut().unwrap_or(&mut fresh))
    })
}

thread_local! {
    /// The quantised inputs of the int8 matmuls this thread calls.
    static QUANT_ACTS: std::cell::RefCell<QuantizedRows> =
        std::cell::RefCell::new(QuantizedRows::default());
    /// Which input rows a grouped matmul's int8 groups read.
    static INT8_ROWS: std::cell::RefCell<Vec<bool>> = const { std::cell::RefCell::new(Vec::new()) };
}

thread_local! {
    /// The bf16 inputs of the native bf16 matmuls this thread calls.
    static BF16_ACTS: std::cell::RefCell<Bf16Acts> = std::cell::RefCell::new(Bf16Acts::default());
}

/// What [`grouped_with`] prepared for its row-block jobs: the plan, and as it asks `panels`
/// (the big groups' transposed inputs), `acts` (`xs` quantised for the int8 kernels) or
/// `bf16` (`xs` converted for the native bf16 kernels); `work_total` (multiply-adds)
/// decides whether to wake the thread pool.
struct Jobs<'a> {
    plan: GroupedPlan,
    work_total: usize,
    panels: &'a Panels,
    acts: Option<&'a QuantizedRows>,
    bf16: Option<&'a Bf16Acts>,
}

/// The row-block jobs of [`grouped_with`], after its checks: one per group and block of
/// [`ROW_BLOCK`] rows, on the thread pool when the work is worth waking it.
fn run_jobs<'w>(
    matrix: &(impl Fn(usize) -> Matrix<'w> + Sync),
    groups: &[Group],
    xs: &[f32],
    out: &mut [f32],
    jobs: &Jobs,
) {
    let (rows, cols) = (matrix(groups[0].matrix).rows, matrix(groups[0].matrix).cols);
    let block_rows = jobs.rows_per_job(groups);
    let blocks = rows.div_ceil(block_rows);
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
        let r0 = job % blocks * block_rows;
        let r1 = (r0 + block_rows).min(rows);
        let o = Out {
            // The group's output rows start `first_out · rows` floats into `out` (checked
            // above to lie inside it), so this is the address `add` would give.
            ptr: dst.offset(g.first_out * rows),
            stride: rows,
            r0,
        };
        // SAFETY: this job owns rows r0..r1 (at most `block_rows`, inside `rows`) of the
        // group's g.n output rows, which lie inside `out` and no other job writes (the
        // other jobs own other row blocks or other groups' disjoint rows, checked by
        // `check_groups`): the contract of `Out::set`, which `block` passes on.
        unsafe { jobs.block(&w, g, job / blocks, r0..r1, xs, o) };
    };
    let count = groups.len() * blocks;
    if jobs.work_total < 1 << 15 {
        // Too small to be worth waking the pool (tiny test models).
        (0..count).for_each(work);
    } else {
        use rayon::prelude::*;
        (0..count).into_par_iter().for_each(work);
    }
}

impl<'a> Jobs<'a> {
    fn new(
        plan: GroupedPlan,
        work_total: usize,
        panels: &'a Panels,
        acts: Option<&'a QuantizedRows>,
        bf16: Option<&'a Bf16Acts>,
    ) -> Jobs<'a> {
        Jobs {
            plan,
            work_total,
            panels,
            acts,
            bf16,
        }
    }

    /// Rows a job takes: [`DECODE_ROW_BLOCK`] when every group is one token (or none) and
    /// its kernels take any number of rows (not the native bf16 ones), else [`ROW_BLOCK`].
    fn rows_per_job(&self, groups: &[Group]) -> usize {
        let native = matches!(self.plan.kernel, GroupedKernel::NativeBf16(_));
        if !native && groups.iter().all(|g| g.n <= 1) {
            DECODE_ROW_BLOCK
        } else {
            ROW_BLOCK
        }
    }

    /// Rows `r` of `w` against the `g.n` input rows of group `g` (number `gi`), with the
    /// plan's kernel for the group's size.
    ///
    /// # Safety
    /// `o` may be written at rows `0 .. r.len()` of its block for tokens `< g.n` (the
    /// contract of [`Out::set`]).
    unsafe fn block(&self, w: &Matrix, g: Group, gi: usize, r: Range<usize>, xs: &[f32], o: Out) {
        let cols = w.cols;
        match (self.plan.kernel, w.data, self.bf16, self.acts) {
            (GroupedKernel::NativeBf16(_), WeightData::Bf16(d), Some(acts), _) => {
                let d = &d[r.start * cols..r.end * cols];
                let bits = half::slice::HalfFloatSliceExt::reinterpret_cast(d);
                // SAFETY: `select` names NativeBf16 only on a CPU with AVX512_BF16; `acts`
                // was filled for these groups with `cols` columns (panels only for an even
                // `cols`); the slice is this job's rows (≤ ROW_BLOCK), which `o` may write
                // for tokens < g.n (the caller's contract).
                unsafe { bf16::run_block(bits, acts, acts.first[gi], g.n, o) };
                return;
            }
            (
                GroupedKernel::Int8 {
                    block,
                    max_tokens,
                    tiles,
                    vnni,
                },
                WeightData::Quant { ty, bytes },
                _,
                Some(acts),
            ) if quant::activation_block(ty) == Some(block) && g.n <= max_tokens => {
                let row_bytes = bytes.len() / w.rows;
                if tiles && quant_tiles::has_tiles(ty) {
                    int8_tiles(ty, bytes, row_bytes, r, acts, g, o, vnni);
                } else {
                    // SAFETY: the caller's contract.
                    unsafe { int8_rows(ty, bytes, row_bytes, r, acts, g, o, vnni) };
                }
                return;
            }
            _ => {}
        }
        if let Some(first) = self.panels.first.get(gi).copied().flatten() {
            let panels = &self.panels.data[first..];
            // SAFETY: AVX-512F is checked here; `select` asks for panels only when the CPU
            // has AVX-512F (for the plan's AVX-512 tiles) or else AVX2 and FMA; the panels
            // of this group hold `g.n` tokens padded to whole panels of `cols` columns; `o`
            // may write rows `r` for tokens < g.n (the caller's contract).
            unsafe {
                if self.plan.avx512 && super::policy::cpu().avx512f {
                    x86::gemm_block(w, r, panels, g.n, o);
                } else {
                    x86::gemm_block_avx2(w, r, panels, g.n, o);
                }
            }
            return;
        }
        let x = &xs[g.first_in * cols..(g.first_in + g.n) * cols];
        // SAFETY: `x` holds the g.n input rows and `o` may write rows `r` for tokens < g.n
        // (the caller's contract), which is `Out::set`'s for both.
        unsafe {
            let simd = self.plan.kernel != GroupedKernel::Portable;
            if !(simd && x86::tiles(w, r.clone(), x, g.n, o, self.plan.avx512)) {
                tiles_portable(w, r, x, g.n, o);
            }
        }
    }
}

/// The int8 dot per weight row and token, for rows `r` of a block-format matrix of a type
/// without register tiles.
///
/// # Safety
/// `o` may be written at rows `0 .. r.len()` of its block for tokens `< g.n`.
#[allow(clippy::too_many_arguments)]
unsafe fn int8_rows(
    ty: crate::quant::GgmlType,
    bytes: &[u8],
    row_bytes: usize,
    r: Range<usize>,
    acts: &QuantizedRows,
    g: Group,
    o: Out,
    vnni: bool,
) {
    if vnni && vnni_rows(ty, bytes, row_bytes, r.clone(), acts, g, o) {
        return;
    }
    if decode_rows(ty, bytes, row_bytes, r.clone(), acts, g, o, vnni) {
        return;
    }
    for (i, ri) in r.enumerate() {
        let row = &bytes[ri * row_bytes..][..row_bytes];
        for t in 0..g.n {
            let v = quant::dot_row(ty, row, acts.row(g.first_in + t));
            // SAFETY: i < r.len() and t < g.n, the caller's contract, which is `Out::set`'s.
            unsafe { o.set(t, i, v) };
        }
    }
}

/// The VNNI kernels over rows `r` for group `g` when they beat the AVX2 ones at its size
/// (`quant::vnni::wins`); false, having written nothing, otherwise.
fn vnni_rows(
    ty: crate::quant::GgmlType,
    bytes: &[u8],
    row_bytes: usize,
    r: Range<usize>,
    acts: &QuantizedRows,
    g: Group,
    o: Out,
) -> bool {
    if !quant::vnni::wins(ty, g.n) {
        return false;
    }
    let rows = &bytes[r.start * row_bytes..r.end * row_bytes];
    let tokens = g.first_in..g.first_in + g.n;
    // SAFETY: `put` gets t < g.n and i < r.len(): row r.start + i lies in this task's rows
    // `r` (the caller's), the contract of `Out::set`.
    let put = |t: usize, i: usize, v: f32| unsafe { o.set(t, i, v) };
    quant::vnni::dot_block(ty, rows, row_bytes, acts, tokens, put)
}

/// A decode step (one token): the row kernels of `quant::decode` over rows `r` (at most
/// [`DECODE_ROW_BLOCK`]), checked once for them all, the 512-bit ones if `vnni` allows them;
/// false, having written nothing, when `ty` has none on this CPU or the group has more
/// than one token.
#[allow(clippy::too_many_arguments)]
fn decode_rows(
    ty: crate::quant::GgmlType,
    bytes: &[u8],
    row_bytes: usize,
    r: Range<usize>,
    acts: &QuantizedRows,
    g: Group,
    o: Out,
    vnni: bool,
) -> bool {
    if g.n != 1 {
        return false;
    }
    let mut v = [0.0f32; DECODE_ROW_BLOCK];
    let v = &mut v[..r.len()];
    let rows = &bytes[r.start * row_bytes..r.end * row_bytes];
    if !quant::decode::dot_rows(ty, rows, row_bytes, acts.row(g.first_in), v, vnni) {
        return false;
    }
    for (i, &x) in v.iter().enumerate() {
        // SAFETY: row r.start + i lies in this task's rows `r` (the caller's) and token
        // 0 < g.n: the contract of `Out::set`.
        unsafe { o.set(0, i, x) };
    }
    true
}

/// The int8 register tiles over rows `r` of a block-format matrix (`bytes`, `row_bytes`
/// a row) for the `g.n` tokens of group `g`: tiles of [`MAX_ROWS`] rows by
/// [`MAX_TILE_TOKENS`] tokens (the VNNI tiles' if `vnni`), nothing allocated.
#[allow(clippy::too_many_arguments)]
fn int8_tiles(
    ty: crate::quant::GgmlType,
    bytes: &[u8],
    row_bytes: usize,
    r: std::ops::Range<usize>,
    acts: &QuantizedRows,
    g: Group,
    o: Out,
    vnni: bool,
) {
    if vnni && vnni_rows(ty, bytes, row_bytes, r.clone(), acts, g, o) {
        return;
    }
    if decode_rows(ty, bytes, row_bytes, r.clone(), acts, g, o, vnni) {
        return;
    }
    let mut ri = r.start;
    if quant::lanes8::wins(ty, g.n) {
        // Eight rows at a time in the lanes; the rows left over take the tiles.
        while r.end - ri >= quant::lanes8::ROWS {
            let rows = &bytes[ri * row_bytes..(ri + quant::lanes8::ROWS) * row_bytes];
            let tokens = g.first_in..g.first_in + g.n;
            let i0 = ri - r.start;
            // SAFETY: `put` gets t < g.n and the eight rows ri..ri + 8, inside this task's
            // rows `r`: the contract of `Out::set_rows`.
            let put = |t: usize, v: &[f32; quant::lanes8::ROWS]| unsafe { o.set_rows(t, i0, v) };
            quant::lanes8::rows8(ty, rows, row_bytes, acts, tokens, put);
            ri += quant::lanes8::ROWS;
        }
    }
    // An odd group's last token takes the one-token row kernel over the rows left rather
    // than a tile half empty (which reads the weights as often as a full one).
    let mut paired = g.n;
    if g.n % 2 == 1 && g.n > 1 && ri < r.end {
        let mut v = [0.0f32; DECODE_ROW_BLOCK];
        let v = &mut v[..r.end - ri];
        let rows = &bytes[ri * row_bytes..r.end * row_bytes];
        let last = acts.row(g.first_in + g.n - 1);
        if quant::decode::dot_rows(ty, rows, row_bytes, last, v, vnni) {
            for (i, &x) in v.iter().enumerate() {
                // SAFETY: row ri + i lies in this task's rows `r` and token g.n − 1 < g.n:
                // the contract of `Out::set`.
                unsafe { o.set(g.n - 1, ri - r.start + i, x) };
            }
            paired = g.n - 1;
        }
    }
    let empty: &[u8] = &[];
    while ri < r.end {
        let nr = (r.end - ri).min(MAX_ROWS);
        let mut rows = [empty; MAX_ROWS];
        for (i, row) in rows[..nr].iter_mut().enumerate() {
            *row = &bytes[(ri + i) * row_bytes..][..row_bytes];
        }
        let mut t = 0;
        while t < paired {
            let nt = (paired - t).min(MAX_TILE_TOKENS);
            let xs: [ActRow; MAX_TILE_TOKENS] =
                std::array::from_fn(|j| acts.row(g.first_in + t + j.min(nt - 1)));
            let mut v = [0.0f32; MAX_ROWS * MAX_TILE_TOKENS];
            let done = quant_tiles::dot_tile(ty, &rows[..nr], &xs[..nt], &mut v[..nr * nt]);
            assert!(done, "int8 tiles: declined after has_tiles");
            for i in 0..nr {
                for j in 0..nt {
                    // SAFETY: row ri + i lies in this task's rows `r` and token t + j < g.n:
                    // the contract of `Out::set`, as for the per-row dots.
                    unsafe { o.set(t + j, ri - r.start + i, v[i * nt + j]) };
                }
            }
            t += nt;
        }
        ri += nr;
    }
}

/// Portable fallback: one widened dot product per (row, token), for rows `r` of `w`
/// against the `n` token rows of `xs`.
///
/// # Safety
/// `out` may be written at rows `0 .. r.len()` of its block for tokens `< n` (the
/// contract of [`Out::set`]).
unsafe fn tiles_portable(w: &Matrix, r: std::ops::Range<usize>, xs: &[f32], n: usize, out: Out) {
    let cols = w.cols;
    let mut row = vec![0.0f32; cols];
    for (i, ri) in r.enumerate() {
        w.row_into(ri, &mut row);
        for t in 0..n {
            let x = &xs[t * cols..(t + 1) * cols];
            // SAFETY: i < r.len() and t < n, the caller's contract, which is `Out::set`'s.
            unsafe { out.set(t, i, dot(&row, x)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::bf16::Bf16Mode;
    use crate::quant::{ALL_TYPES, GgmlType, QK_K};

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
            // One token over columns in sixteens: AVX2's bf16 decode kernel, with rows
            // that fill its four streams and rows left over.
            (3, 16, 1),
            (37, 48, 1),
            (32, 2048, 1),
            (37, 24, 5),
            (70, 131, 9),
            (65, 2048, 67),
            // The panel kernel: columns not a multiple of 16 or of its column block,
            // partial panels (one of at most 16 tokens: the AVX2 kernel's single half),
            // row blocks that end in an odd row (its padded tile), the AVX2 threshold
            // (12), AVX-512's for f32 (24) and for the others (40); a last 1–8 tokens of a
            // panel (AVX2's 8-token tile) under row blocks of 31 and 5 rows.
            (31, 40, 21),
            (5, 33, 17),
            (33, 150, 45),
            (50, 16, 24),
            (9, 300, 40),
            (13, 64, 12),
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
                // The AVX-512 widening tiles too where the native bf16 kernels would run.
                for (avx512, widen) in [(false, false), (true, false), (true, true)] {
                    let mut fast = vec![0.0f32; n * rows];
                    if widen {
                        bf16::with_bf16_mode(None, || m.matmul_with(&xs, &mut fast, avx512));
                    } else {
                        m.matmul_with(&xs, &mut fast, avx512);
                    }
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

    /// The outer-product kernels of both widths sum each output in the same order, so on a
    /// CPU with AVX-512 the AVX2 panels (the tiles without AVX-512) give the AVX-512
    /// panels' bits. Skipped where the CPU lacks AVX-512F (the AVX2 kernel alone is held
    /// to the reference by `matmul_equals_reference_matvec`).
    #[test]
    fn panels_of_both_widths_give_the_same_bits() {
        if !crate::kernels::policy::cpu().avx512f {
            eprintln!("panels_of_both_widths_give_the_same_bits: no AVX-512F here, skipped");
            return;
        }
        for &(rows, cols, n) in &[(33, 150, 45), (65, 2048, 67), (9, 300, 40), (40, 131, 97)] {
            let w: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
                .collect();
            let xs: Vec<f32> = (0..n * cols)
                .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
                .collect();
            let m = Matrix::f32(&w, rows, cols);
            let (mut wide, mut narrow) = (vec![0.0f32; n * rows], vec![0.0f32; n * rows]);
            m.matmul_with(&xs, &mut wide, true);
            m.matmul_with(&xs, &mut narrow, false);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&wide), bits(&narrow), "{rows}x{cols} n={n}");
        }
    }

    /// The native bf16 kernels (both activation modes, the dot tiles and the pair panels)
    /// against the exact dot in f64 of the bf16 weights and the activations the mode
    /// defines: `x` itself for Split, `bf16(x)` for Round. A lane's chain of rounded
    /// additions is at most `3·cols` long (two roundings per `vdpbf16ps` pair, three
    /// pieces in Split) plus 4 of the horizontal sum, so the bound is `(3·cols + 8)·ε·Σ|w·x|`,
    /// plus Split's representation error `2⁻²⁷·Σ|w·x|`. (`vdpbf16ps` flushes subnormal
    /// inputs; the test's values have none.) Skipped where the CPU lacks AVX512_BF16.
    #[test]
    fn bf16_native_kernels_equal_the_exact_dot() {
        use bf16::with_bf16_mode;
        if !bf16::available() {
            eprintln!("bf16_native_kernels_equal_the_exact_dot: no AVX512_BF16 here, skipped");
            return;
        }
        for &(rows, cols, n) in &[
            (1, 3, 1),
            (7, 40, 1),
            (37, 131, 5),
            (70, 2048, 1),
            (65, 2048, 67),
            (33, 150, 45),
            (9, 300, 40),
            (40, 131, 41),
        ] {
            let wb: Vec<half::bf16> = (0..rows * cols)
                .map(|i| half::bf16::from_f32(((i * 37 % 101) as f32 - 50.0) / 61.0))
                .collect();
            let xs: Vec<f32> = (0..n * cols)
                .map(|i| ((i as f32) * 0.7311).sin() * 3.1)
                .collect();
            let m = Matrix::bf16(&wb, rows, cols);
            for mode in [Bf16Mode::Split, Bf16Mode::Round] {
                let mut fast = vec![0.0f32; n * rows];
                with_bf16_mode(Some(mode), || m.matmul_with(&xs, &mut fast, true));
                for t in 0..n {
                    for r in 0..rows {
                        let (mut exact, mut abs) = (0.0f64, 0.0f64);
                        for c in 0..cols {
                            let x = xs[t * cols + c];
                            let x = match mode {
                                Bf16Mode::Split => x,
                                Bf16Mode::Round => half::bf16::from_f32(x).to_f32(),
                            };
                            let p = wb[r * cols + c].to_f32() as f64 * x as f64;
                            exact += p;
                            abs += p.abs();
                        }
                        let split = if mode == Bf16Mode::Split {
                            2f64.powi(-27)
                        } else {
                            0.0
                        };
                        let bound = ((3 * cols + 8) as f64 * f32::EPSILON as f64 + split) * abs;
                        let got = fast[t * rows + r] as f64;
                        assert!(
                            (got - exact).abs() <= bound,
                            "{mode:?} {rows}x{cols} n={n} [{t},{r}]: {got} vs {exact} (bound {bound:e})"
                        );
                    }
                }
            }
        }
    }

    /// A block-format matrix (every ggml type): quantised by `quant::quantize`, with its
    /// dequantised f32 copy, the reference the Quant paths are pinned to.
    fn quantised(ty: GgmlType, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| (((i * 7919) % 211) as f32 - 105.0) / 97.0 * (1.0 + (i % 13) as f32))
            .collect();
        let mut bytes = Vec::new();
        crate::quant::quantize(ty, &w, &mut bytes);
        let mut f = vec![0.0f32; rows * cols];
        crate::quant::dequantize(ty, &bytes, &mut f);
        (bytes, f)
    }

    #[test]
    fn quant_paths_equal_the_dequantised_reference() {
        for ty in ALL_TYPES {
            let bs = ty.block_size();
            let shapes: &[(usize, usize)] = if bs == QK_K {
                &[(37, 256), (33, 768)]
            } else {
                &[(37, 96), (70, 288), (9, 256)]
            };
            for &(rows, cols) in shapes {
                let (bytes, f) = quantised(ty, rows, cols);
                let q = Matrix::quant(ty, &bytes, rows, cols);
                let reference = Matrix::f32(&f, rows, cols);
                // Spans: whole rows, inside one block, across block edges, the row's end.
                let mut out = vec![0.0f32; cols];
                for (r, c0, len) in [
                    (0, 0, cols),
                    (rows - 1, 3, 5),
                    (1, bs - 1, 2),
                    (2, cols - 7, 7),
                ] {
                    let len = len.min(cols - c0);
                    q.row_slice_into(r, c0, &mut out[..len]);
                    assert_eq!(
                        &out[..len],
                        &f[r * cols + c0..][..len],
                        "{ty:?} row {r} {c0}+{len}"
                    );
                }
                let block = q.row_block(3, 4);
                block.row_into(2, &mut out);
                assert_eq!(out, f[5 * cols..6 * cols], "{ty:?} row_block");
                for n in [1, 5, 45] {
                    let xs: Vec<f32> = (0..n * cols)
                        .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
                        .collect();
                    for avx512 in [false, true] {
                        let mut fast = vec![0.0f32; n * rows];
                        // The f32 path (the int8 one is pinned in quant.rs and quant/tiles.rs).
                        quant::with_quant_activations(false, || {
                            q.matmul_with(&xs, &mut fast, avx512)
                        });
                        for t in 0..n {
                            let x = &xs[t * cols..(t + 1) * cols];
                            let (mut clear, mut exact) = (vec![0.0; rows], vec![0.0; rows]);
                            q.matvec(x, &mut clear);
                            reference.matvec(x, &mut exact);
                            for r in 0..rows {
                                let b = bound(&f[r * cols..(r + 1) * cols], x);
                                let (a, c, e) = (fast[t * rows + r], clear[r], exact[r]);
                                assert!(
                                    (a - e).abs() <= b,
                                    "{ty:?} {rows}x{cols} fast [{t},{r}]: {a} vs {e}"
                                );
                                assert!(
                                    (c - e).abs() <= b,
                                    "{ty:?} {rows}x{cols} clear [{t},{r}]: {c} vs {e}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_non_finite_block_scale_is_found() {
        let (mut bytes, _) = quantised(GgmlType::Q8_0, 4, 64);
        // Row 2's second block (34 bytes a block, 2 blocks a row): its f16 scale is NaN.
        let at = 2 * 68 + 34;
        bytes[at..at + 2].copy_from_slice(&half::f16::NAN.to_bits().to_le_bytes());
        let q = Matrix::quant(GgmlType::Q8_0, &bytes, 4, 64);
        assert_eq!(q.find_non_finite(), Some((2, 32)));
    }
}
