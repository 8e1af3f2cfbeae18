//! The x86-64 kernels of chapter 10 and their run-time dispatch: AVX2+FMA+F16C register
//! tiles, the one-token bf16 kernel (`bf16_decode`, on every CPU with AVX2) and AVX-512
//! tiles for the matmuls of `matmul.rs`, the outer-product kernels `gemm_block` (AVX-512)
//! and `gemm_block_avx2` for prefill, and the attention kernels of both widths for
//! `attention.rs` and `attention_block.rs`. Compiled on x86-64 only (the `mod x86`
//! declaration carries the one `cfg`); each entry point checks the CPU (`policy::cpu`,
//! detected once) and declines when it lacks the features, so the caller's portable code
//! runs. Tests pin every path equal to its reference in the file that calls it
//! (`matmul.rs`, `attention.rs`).

use super::scratch::HugeScratch;
use super::{Matrix, Out, PANEL, ROW_BLOCK, WeightData};
use std::arch::x86_64::*;
use std::ops::Range;

mod attention;
mod bf16_decode;
pub(super) use attention::{attend, block_scores, block_values};

/// A weight element the tiles can widen to f32.
trait Elem: Copy + Sync {
    fn widen(self) -> f32;
    /// Eight elements starting at `p`, widened.
    ///
    /// # Safety
    /// `p..p+8` must be readable and the CPU must support AVX2 and F16C.
    unsafe fn load8(p: *const Self) -> __m256;
    /// Sixteen elements starting at `p`, widened.
    ///
    /// # Safety
    /// `p..p+16` must be readable and the CPU must support AVX-512F.
    unsafe fn load16(p: *const Self) -> __m512;
}

/// The eight lanes of `v` summed pairwise (the one horizontal sum of the 8-lane kernels).
#[target_feature(enable = "avx2")]
#[inline]
pub(in crate::kernels) fn hsum8(v: __m256) -> f32 {
    hsum4(_mm_add_ps(
        _mm256_castps256_ps128(v),
        _mm256_extractf128_ps(v, 1),
    ))
}

/// The four lanes of `v` summed pairwise.
#[target_feature(enable = "avx2")]
#[inline]
pub(in crate::kernels) fn hsum4(v: __m128) -> f32 {
    let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// The eight i32 lanes of `v` summed.
#[target_feature(enable = "avx2")]
#[inline]
pub(in crate::kernels) fn hsum_i32(v: __m256i) -> i32 {
    hsum4_i32(_mm_add_epi32(
        _mm256_castsi256_si128(v),
        _mm256_extracti128_si256(v, 1),
    ))
}

/// The four i32 lanes of `s` summed.
#[target_feature(enable = "avx2")]
#[inline]
pub(in crate::kernels) fn hsum4_i32(s: __m128i) -> i32 {
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Asks for the cache lines of the `bytes` bytes from `p` (a hint: the address may lie
/// past any allocation, which a prefetch never faults on).
#[inline(always)]
pub(in crate::kernels) fn prefetch_lines(p: *const u8, bytes: usize) {
    for k in (0..bytes).step_by(64) {
        // SAFETY: a prefetch is a hint that never faults, whatever the address;
        // `wrapping_add` computes it without asserting it is in bounds.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(k) as *const i8) };
    }
}

/// Tokens whose inputs stay hot in L2 while a row group sweeps them.
const TOKEN_BLOCK: usize = 64;

// ------------------------------------------------------------------ dispatch

/// Whether the matmul uses its AVX-512 tiles: the calling thread's policy (the CPU has
/// AVX-512F and `ANATOMY_NO_AVX512` is not 1, unless a test forced another).
pub fn use_avx512() -> bool {
    super::policy::current().avx512()
}

/// `out[t, i] = w[r.start + i]·xs[t]` for the rows `r` of `w` (at most [`ROW_BLOCK`]) and
/// the `n` token rows of `xs`, with the widest tiles the CPU has (AVX-512 only if
/// `avx512`). Returns false, having done nothing, when it has none.
///
/// # Safety
/// `out` may be written at rows `0 .. r.len()` of its block for tokens `< n` (the contract
/// of [`Out::set`]), and `xs` must hold `n` rows of `w.cols`.
pub(super) unsafe fn tiles(
    w: &Matrix,
    r: Range<usize>,
    xs: &[f32],
    n: usize,
    out: Out,
    avx512: bool,
) -> bool {
    let span = r.start * w.cols..r.end * w.cols;
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match w.data {
            WeightData::F32(d) => tiles_typed(&d[span], w.cols, xs, n, out, avx512),
            WeightData::Bf16(d) => {
                let d = &d[span];
                // One token: the decode kernel, with or without AVX-512 (a 512-bit form of
                // it read no faster), which declines columns that are not in sixteens.
                let one = n == 1 && super::policy::cpu().avx2_fma();
                (one && bf16_decode::matvec(d, w.cols, xs, out))
                    || tiles_typed(d, w.cols, xs, n, out, avx512)
            }
            WeightData::F16(d) => tiles_typed(&d[span], w.cols, xs, n, out, avx512),
            // A block format: the block's rows are dequantised once into this thread's
            // buffer (ROW_BLOCK rows), then the f32 tiles run on them.
            WeightData::Quant { .. } => QUANT_ROWS.with_borrow_mut(|scratch| {
                let rows = scratch.floats(span.len());
                for (i, row) in rows.chunks_exact_mut(w.cols).enumerate() {
                    w.row_into(r.start + i, row);
                }
                tiles_typed(&rows[..], w.cols, xs, n, out, avx512)
            }),
        }
    }
}

thread_local! {
    /// A row block of a block-format matrix dequantised for [`tiles`], one per thread.
    static QUANT_ROWS: std::cell::RefCell<HugeScratch> = std::cell::RefCell::default();
}

// ------------------------------------------------------------------ matmul tiles

/// [`tiles`] for one element type.
///
/// # Safety
/// As for [`tiles`], with `w` the block's rows (`[rows ≤ ROW_BLOCK, cols]`).
unsafe fn tiles_typed<E: Elem>(
    w: &[E],
    cols: usize,
    xs: &[f32],
    n: usize,
    out: Out,
    avx512: bool,
) -> bool {
    let cpu = super::policy::cpu();
    if avx512 && cols >= 16 && cpu.avx512f {
        // SAFETY: AVX-512F was detected just above; the rest is the caller's contract.
        unsafe { tiles_avx512(w, cols, xs, n, out) };
        return true;
    }
    if cols >= 8 && cpu.avx2_fma() {
        // SAFETY: the three features the function is compiled with were detected above;
        // the rest is the caller's contract.
        unsafe { tiles_avx2(w, cols, xs, n, out) };
        return true;
    }
    false
}

/// Rows in groups of 3 (4 when there is a single token) and tokens in groups of 3, each
/// group one register tile: 3×3 accumulators + 3 inputs + 1 weight vector fit the 16 ymm
/// registers without spilling.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `w` is `[rows ≤ ROW_BLOCK, cols]`, `xs` holds
/// `n` rows of `cols`, and `out` may write rows `< rows` for tokens `< n`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tiles_avx2<E: Elem>(w: &[E], cols: usize, xs: &[f32], n: usize, out: Out) {
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

/// One R×T register tile: R weight rows against T token rows, 8 columns per step, R·T
/// independent accumulators; the `cols % 8` tail is summed in scalar.
///
/// # Safety
/// Rows `r..r+R` of `w` (`[rows, cols]`, rows of this task's block) and tokens `t..t+T`
/// of `xs` must exist, and the CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
// ANCHOR: tile
unsafe fn tile<E: Elem, const R: usize, const T: usize>(
    w: &[E],
    cols: usize,
    xs: &[f32],
    out: Out,
    r: usize,
    t: usize,
) {
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
    // ANCHOR_END: tile
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

/// [`tiles_avx2`] with 16-lane registers: 32 of them hold a 4×4 tile (16 accumulators,
/// 4 weight vectors, 1 input vector) without spilling. (3×8 tiles, which share each
/// widened bf16 weight vector among 8 FMAs, measured no faster on prefill: the inputs'
/// trips to L2, not the widening, set the pace.)
///
/// # Safety
/// As for [`tiles_avx2`], with AVX-512F instead of AVX2/FMA/F16C.
#[target_feature(enable = "avx512f")]
unsafe fn tiles_avx512<E: Elem>(w: &[E], cols: usize, xs: &[f32], n: usize, out: Out) {
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
#[target_feature(enable = "avx512f")]
unsafe fn tile512<E: Elem, const R: usize, const T: usize>(
    w: &[E],
    cols: usize,
    xs: &[f32],
    out: Out,
    r: usize,
    t: usize,
) {
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

// ------------------------------------------------------------------ prefill: outer products

thread_local! {
    /// Weight rows widened to f32 for [`gemm_block`], one buffer per thread (grown once).
    static WIDE_ROWS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

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
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn gemm_block(w: &Matrix, r: Range<usize>, panels: &[f32], n: usize, out: Out) {
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

/// [`gemm_block`] for CPUs with AVX2 and FMA: a register tile of 6 rows × 16 tokens
/// (12 accumulators, two input vectors and one broadcast weight: 15 of the 16 ymm
/// registers), a panel's tokens sixteen at a time over the row block in tiles of 6, 4 and
/// 2 rows, and a last one to eight tokens by an 8-token tile of up to 12 rows (less
/// padding than a half-empty sixteen). Each output is summed over the columns in order
/// with one FMA a step, as in `gemm_block`, so the two kernels give the same bits.
///
/// # Safety
/// AVX2, FMA and F16C must be available; `panels` must hold `ceil(n / PANEL)` panels of
/// `w.cols` columns; `out` may write rows `r` (of this task's block) for tokens `< n`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm_block_avx2(
    w: &Matrix,
    r: Range<usize>,
    panels: &[f32],
    n: usize,
    out: Out,
) {
    const KC: usize = 512;
    let (cols, nr) = (w.cols, r.len());
    assert!(nr <= ROW_BLOCK, "gemm_block_avx2: more rows than a block");
    // The tiles (first row, rows): sixes, then a four or a two (the last one padded).
    let mut tiles = [(0, 0); ROW_BLOCK];
    let mut count = 0;
    let mut i = 0;
    while i < nr {
        let mr = match nr - i {
            6.. => 6,
            4 | 5 => 4,
            _ => 2,
        };
        tiles[count] = (i, mr);
        (count, i) = (count + 1, i + mr);
    }
    let tiles = &tiles[..count];
    // The 8-token tile's rows: twelves, then the rest rounded up to even (its 12
    // accumulators take one input load a column where the 16-token tile takes two).
    let mut narrow = [(0, 0); ROW_BLOCK];
    let mut narrow_count = 0;
    for i in (0..nr).step_by(12) {
        narrow[narrow_count] = (i, (nr - i).min(12).next_multiple_of(2));
        narrow_count += 1;
    }
    let narrow = &narrow[..narrow_count];
    WIDE_ROWS.with_borrow_mut(|wide| {
        // Rows padded with a zero row to an even count (the smallest tile has 2), each
        // row's stride padded as in `gemm_block` (columns past `cols` are never read).
        let stride = cols + 16;
        let padded = nr.next_multiple_of(2);
        if wide.len() < padded * stride {
            wide.resize(padded * stride, 0.0);
        }
        for (i, row) in wide.chunks_exact_mut(stride).take(padded).enumerate() {
            if i < nr {
                w.row_slice_into(r.start + i, 0, &mut row[..cols]);
            } else {
                row.fill(0.0);
            }
        }
        let mut sums = [[0.0f32; PANEL]; ROW_BLOCK];
        for (p, panel) in panels
            .chunks_exact(PANEL * cols)
            .take(n.div_ceil(PANEL))
            .enumerate()
        {
            let tokens = (n - p * PANEL).min(PANEL);
            // Whole sixteens, and a last eight or fewer by the narrow tile.
            let narrow_tail = matches!(tokens % (PANEL / 2), 1..=8);
            let halves = tokens / (PANEL / 2) + usize::from(matches!(tokens % (PANEL / 2), 9..));
            for row in &mut sums {
                row.fill(0.0);
            }
            for k0 in (0..cols).step_by(KC) {
                let ks = k0..(k0 + KC).min(cols);
                let x = &panel[ks.start * PANEL..ks.end * PANEL];
                for &(i, mr) in tiles {
                    let a = |m: usize| &wide[(i + m) * stride..][ks.clone()];
                    for half in (0..halves).map(|h| h * PANEL / 2) {
                        let at = (i, half);
                        match mr {
                            6 => tile_avx2(std::array::from_fn::<_, 6, _>(a), x, at, &mut sums),
                            4 => tile_avx2(std::array::from_fn::<_, 4, _>(a), x, at, &mut sums),
                            _ => tile_avx2(std::array::from_fn::<_, 2, _>(a), x, at, &mut sums),
                        }
                    }
                }
                if narrow_tail {
                    for &(i, mr) in narrow {
                        let a = |m: usize| &wide[(i + m) * stride..][ks.clone()];
                        tile8_rows(a, mr, x, (i, halves * PANEL / 2), &mut sums);
                    }
                }
            }
            for (i, row) in sums.iter().enumerate().take(nr) {
                for (j, &v) in row.iter().enumerate().take(tokens) {
                    // SAFETY: row i is in this task's block and token p·PANEL+j < n, the
                    // caller's contract, which is `Out::set`'s.
                    unsafe { out.set(p * PANEL + j, i, v) };
                }
            }
        }
    });
}

/// `sums[i + m][j0 + j] += Σ_k a[m][k] · x[k][j0 + j]` for `m < MR`, `j < 16`, over the
/// columns `k` of a column block (`a` the tile's rows, `x` the panel's block), each sum
/// taken in column order with one FMA a step.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tile_avx2<const MR: usize>(
    a: [&[f32]; MR],
    x: &[f32],
    (i, j0): (usize, usize),
    sums: &mut [[f32; PANEL]; ROW_BLOCK],
) {
    let x = x.as_chunks::<PANEL>().0;
    assert!(a.iter().all(|a| a.len() == x.len()) && j0 <= PANEL / 2);
    let mut acc: [[__m256; 2]; MR] =
        std::array::from_fn(|m| [load8(&sums[i + m][j0..]), load8(&sums[i + m][j0 + 8..])]);
    for (k, x) in x.iter().enumerate() {
        let x = &x[j0..j0 + 16];
        let (x0, x1) = (load8(x), load8(&x[8..]));
        for (acc, a) in acc.iter_mut().zip(&a) {
            // SAFETY: k < x.len(), which is every row's length (asserted above).
            let b = _mm256_set1_ps(unsafe { *a.get_unchecked(k) });
            acc[0] = _mm256_fmadd_ps(b, x0, acc[0]);
            acc[1] = _mm256_fmadd_ps(b, x1, acc[1]);
        }
    }
    for (m, acc) in acc.iter().enumerate() {
        store8(&mut sums[i + m][j0..], acc[0]);
        store8(&mut sums[i + m][j0 + 8..], acc[1]);
    }
}

/// [`tile8_avx2`] over the `mr` rows `a(0) .. a(mr)` (`mr` even, at most 12).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tile8_rows<'a>(
    a: impl Fn(usize) -> &'a [f32],
    mr: usize,
    x: &[f32],
    at: (usize, usize),
    s: &mut [[f32; PANEL]; ROW_BLOCK],
) {
    match mr {
        12 => tile8_avx2(std::array::from_fn::<_, 12, _>(a), x, at, s),
        10 => tile8_avx2(std::array::from_fn::<_, 10, _>(a), x, at, s),
        8 => tile8_avx2(std::array::from_fn::<_, 8, _>(a), x, at, s),
        6 => tile8_avx2(std::array::from_fn::<_, 6, _>(a), x, at, s),
        4 => tile8_avx2(std::array::from_fn::<_, 4, _>(a), x, at, s),
        _ => tile8_avx2(std::array::from_fn::<_, 2, _>(a), x, at, s),
    }
}

/// [`tile_avx2`] for 8 tokens: `sums[i + m][j0 + j] += Σ_k a[m][k] · x[k][j0 + j]` for
/// `m < MR`, `j < 8`, each sum in column order with one FMA a step (the same bits).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tile8_avx2<const MR: usize>(
    a: [&[f32]; MR],
    x: &[f32],
    (i, j0): (usize, usize),
    sums: &mut [[f32; PANEL]; ROW_BLOCK],
) {
    let x = x.as_chunks::<PANEL>().0;
    assert!(a.iter().all(|a| a.len() == x.len()) && j0 + 8 <= PANEL);
    let mut acc: [__m256; MR] = std::array::from_fn(|m| load8(&sums[i + m][j0..]));
    for (k, x) in x.iter().enumerate() {
        let x0 = load8(&x[j0..]);
        for (acc, a) in acc.iter_mut().zip(&a) {
            // SAFETY: k < x.len(), which is every row's length (asserted above).
            let b = _mm256_set1_ps(unsafe { *a.get_unchecked(k) });
            *acc = _mm256_fmadd_ps(b, x0, *acc);
        }
    }
    for (m, acc) in acc.iter().enumerate() {
        store8(&mut sums[i + m][j0..], *acc);
    }
}

/// Eight f32 at `s[..8]` (bounds-checked, then an unaligned load).
#[target_feature(enable = "avx2")]
#[inline]
fn load8(s: &[f32]) -> __m256 {
    let s = &s[..8];
    // SAFETY: the slice holds eight floats; the load is unaligned.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// `v` into `s[..8]` (bounds-checked, then an unaligned store).
#[target_feature(enable = "avx2")]
#[inline]
fn store8(s: &mut [f32], v: __m256) {
    let s = &mut s[..8];
    // SAFETY: the slice holds eight floats; the store is unaligned.
    unsafe { _mm256_storeu_ps(s.as_mut_ptr(), v) }
}

// ------------------------------------------------------------------ widening loads

impl Elem for f32 {
    fn widen(self) -> f32 {
        self
    }
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: the caller guarantees 8 readable f32 at p and AVX support.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> __m512 {
        // SAFETY: the caller guarantees 16 readable f32 at p and AVX-512F support.
        unsafe { _mm512_loadu_ps(p) }
    }
}

impl Elem for half::bf16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    unsafe fn load8(p: *const half::bf16) -> __m256 {
        // bf16 is the top half of an f32: zero-extend each 16-bit lane to 32 bits and shift
        // it up 16 — exact, the same value `to_f32` gives.
        // SAFETY: the caller guarantees 8 readable bf16 (16 bytes) at p and AVX2 support.
        unsafe {
            let h = _mm_loadu_si128(p as *const __m128i);
            _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
        }
    }
    #[inline(always)]
    unsafe fn load16(p: *const half::bf16) -> __m512 {
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
    #[inline(always)]
    unsafe fn load8(p: *const half::f16) -> __m256 {
        // SAFETY: the caller guarantees 8 readable f16 (16 bytes) at p and F16C support;
        // vcvtph2ps converts exactly.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
    #[inline(always)]
    unsafe fn load16(p: *const half::f16) -> __m512 {
        // SAFETY: the caller guarantees 16 readable f16 (32 bytes) at p and AVX-512F.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
}
