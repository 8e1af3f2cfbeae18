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
use super::{
    DECODE_JOB_BYTES, DECODE_JOBS_PER_THREAD, DECODE_ROW_BLOCK, MAX_DECODE_ROWS, MIN_DECODE_ROWS,
    Matrix, Out, OutPtr, PANEL, ROW_BLOCK, WeightData, dot, x86,
};
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
    let block_rows = jobs.rows_per_job(groups, &matrix(groups[0].matrix));
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

    /// Rows a job takes: [`ROW_BLOCK`] unless every group is one token (or none) and its
    /// kernels take any number of rows (not the native bf16 ones). A decode job's rows are
    /// read once, in streams that start cold at every job, so it takes as many rows as
    /// fill [`DECODE_JOB_BYTES`] (at most [`MAX_DECODE_ROWS`]) when its kernel streams
    /// them from the weights, while every thread still gets [`DECODE_JOBS_PER_THREAD`]
    /// jobs; [`DECODE_ROW_BLOCK`] when the rows are first dequantised into a buffer.
    fn rows_per_job(&self, groups: &[Group], w: &Matrix) -> usize {
        let native = matches!(self.plan.kernel, GroupedKernel::NativeBf16(_));
        if native || groups.iter().any(|g| g.n > 1) {
            return ROW_BLOCK;
        }
        let int8 = matches!(self.plan.kernel, GroupedKernel::Int8 { .. });
        let row_bytes = match w.data {
            WeightData::Quant { ty, bytes } if int8 && quant::decode::has_decode(ty) => {
                bytes.len() / w.rows.max(1)
            }
            WeightData::Quant { .. } => return DECODE_ROW_BLOCK,
            WeightData::F32(_) => w.cols * 4,
            WeightData::Bf16(_) | WeightData::F16(_) => w.cols * 2,
        };
        let busy = groups.iter().filter(|g| g.n > 0).count();
        decode_job_rows(row_bytes, busy * w.rows, rayon::current_num_threads())
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

/// Rows of a decode job whose kernel streams rows of `row_bytes` bytes, when the call's
/// groups hold `rows` rows in all and `threads` threads share them: enough to fill
/// [`DECODE_JOB_BYTES`], but no more than give each thread [`DECODE_JOBS_PER_THREAD`]
/// jobs (one thread takes the bytes' worth), within `MIN_DECODE_ROWS ..= MAX_DECODE_ROWS`.
fn decode_job_rows(row_bytes: usize, rows: usize, threads: usize) -> usize {
    let by_bytes = DECODE_JOB_BYTES / row_bytes.max(1);
    let by_threads = if threads > 1 {
        rows.div_ceil(DECODE_JOBS_PER_THREAD * threads)
    } else {
        usize::MAX
    };
    by_bytes
        .min(by_threads)
        .clamp(MIN_DECODE_ROWS, MAX_DECODE_ROWS)
}

/// A decode step (one token): the row kernels of `quant::decode` over rows `r` (at most
/// [`MAX_DECODE_ROWS`]), checked once for them all, the 512-bit ones if `vnni` allows them;
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
    let mut v = [0.0f32; MAX_DECODE_ROWS];
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
mod tests;
