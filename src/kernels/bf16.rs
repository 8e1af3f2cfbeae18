//! Native bf16 products (chapter 10) for CPUs with AVX512_BF16: `vdpbf16ps` multiplies 32
//! pairs of bf16 numbers and adds each pair's two products into one of 16 f32 lanes, so a
//! bf16 weight matrix is read as it is stored — no widening instruction per weight.
//!
//! The instruction wants both operands in bf16, so the activations are converted once per
//! matmul call, on the calling thread, in one of two [`Bf16Mode`]s:
//! - [`Bf16Mode::Split`] (`ANATOMY_BF16_ACTIVATIONS=split`): each activation `x` becomes
//!   three bf16 pieces, each the nearest bf16 to what the ones before it left, so
//!   `|x − Σ pieces| ≤ 2⁻²⁷·|x|`, below f32's own rounding (2⁻²⁴), and a product costs
//!   three `vdpbf16ps`. Logits stay within f32 rounding of the widening kernels, so
//!   transformers' f32-compute fixtures pass unchanged (two pieces, 2⁻¹⁸, measured 3.3e-5
//!   on the bf16_sharded fixture: past its 1e-5). Groups of prefill size take the widening
//!   kernels (`x86::gemm_block`), which are faster there. Where `vdpbf16ps` runs at only
//!   half the f32 FMA rate, three products per pair are no longer hidden behind memory
//!   and Split decodes slower than the widening kernels, so it is opt-in (the measured
//!   figures are on chapter 10's Reproducing page).
//! - [`Bf16Mode::Round`] (`ANATOMY_BF16_ACTIVATIONS=round`): `x` rounded to bf16, as
//!   llama.cpp's bf16 path and transformers' bf16 compute do; one instruction per pair,
//!   twice the arithmetic rate of the f32 FMA path in prefill (tests/bf16_compute.rs
//!   measures the logit error against transformers' f32 and bf16 computations).
//!
//! Two kernels: register tiles of dot products (up to 4 rows × 4 tokens, 32 columns a
//! step; decode and small expert groups) and, in Round mode for groups of at least the
//! panel threshold, an outer-product kernel over token panels whose columns are
//! interleaved in pairs, with each weight pair broadcast as one 32-bit lane. `ANATOMY_NO_BF16=1` (or
//! `ANATOMY_NO_AVX512=1`) turns the path off, to measure the widening kernels on the same
//! CPU. Tests in `matmul.rs` pin both modes and both kernels to the reference.

pub use super::policy::Bf16Mode;
use super::policy::{current, with_switches};

/// Runs `f` with this thread's bf16 matmuls forced to `mode` (`None`: the widening
/// kernels), whatever the environment says; the mode still needs the CPU ([`available`]).
pub fn with_bf16_mode<R>(mode: Option<Bf16Mode>, f: impl FnOnce() -> R) -> R {
    with_switches(
        |s| {
            s.no_bf16 = false;
            s.bf16_activations = mode;
        },
        f,
    )
}

/// Whether the CPU has what the kernels are compiled with: AVX-512F, BW and BF16.
pub fn available() -> bool {
    super::policy::cpu().bf16()
}

/// The mode this thread's bf16 matmuls take now (the policy's); `None` when the CPU lacks
/// AVX512_BF16 or the path is off.
pub fn mode() -> Option<Bf16Mode> {
    current().bf16()
}

/// The nearest bf16 to `x` (ties to even), as bits.
fn bf16_bits(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

/// Activation pieces per mode.
pub fn pieces(mode: Bf16Mode) -> usize {
    match mode {
        Bf16Mode::Split => 3,
        Bf16Mode::Round => 1,
    }
}

/// `x` as its bf16 pieces for `mode` (the unused ones 0). Each remainder `x − piece` is
/// exact in f32: a piece is within half a bf16 step of what it rounds, and that has at
/// least as many trailing bits.
fn convert(x: f32, mode: Bf16Mode) -> [u16; 3] {
    let mut out = [0u16; 3];
    let mut rest = x;
    for o in out.iter_mut().take(pieces(mode)) {
        *o = bf16_bits(rest);
        rest -= half::bf16::from_bits(*o).to_f32();
    }
    out
}

/// Token panels interleaved in column pairs: for panel `p`, pair `k`, token `j` and half
/// `h`, element `((p · pairs + k) · PANEL + j) · 2 + h` is column `2k + h` of token
/// `p · PANEL + j` (zero-padded past `cols` and past the group's tokens).
pub const PANEL: usize = super::PANEL;

/// The activations of one grouped matmul in bf16: row-major rows for the groups that take
/// the dot tiles, pair-interleaved panels for the others. Reused from call to call.
#[derive(Default)]
pub struct Bf16Acts {
    pub mode: Option<Bf16Mode>,
    pub cols: usize,
    /// Per group: offset of its first row (`Rows`) or first panel (`Panels`) in `pieces`.
    pub first: Vec<Layout>,
    /// The activations' pieces, each in the same layout; only the first is filled in
    /// [`Bf16Mode::Round`].
    pub pieces: [Vec<u16>; 3],
}

/// Where a group's converted inputs start, and in which layout.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    Rows(usize),
    Panels(usize),
}

impl Bf16Acts {
    /// Converts the input rows of `groups` (`(first_in, n)` each) from `xs` (`[·, cols]`):
    /// groups of at least `min_tokens` rows into panels, the others into rows.
    pub fn fill(
        &mut self,
        mode: Bf16Mode,
        xs: &[f32],
        cols: usize,
        groups: impl Iterator<Item = (usize, usize)> + Clone,
        min_tokens: usize,
    ) {
        let pairs = cols.div_ceil(2);
        self.mode = Some(mode);
        self.cols = cols;
        self.first.clear();
        let mut len = 0;
        for (_, n) in groups.clone() {
            if n >= min_tokens {
                self.first.push(Layout::Panels(len));
                len += n.div_ceil(PANEL) * pairs * PANEL * 2;
            } else {
                self.first.push(Layout::Rows(len));
                len += n * cols;
            }
        }
        let count = pieces(mode);
        for (k, p) in self.pieces.iter_mut().enumerate() {
            p.clear();
            p.resize(if k < count { len } else { 0 }, 0);
        }
        for ((first_in, n), at) in groups.zip(&self.first) {
            let rows = &xs[first_in * cols..(first_in + n) * cols];
            match *at {
                Layout::Rows(o) => {
                    for (i, &x) in rows.iter().enumerate() {
                        for (p, v) in self.pieces.iter_mut().zip(convert(x, mode)).take(count) {
                            p[o + i] = v;
                        }
                    }
                }
                Layout::Panels(o) => {
                    for (t, row) in rows.chunks_exact(cols).enumerate() {
                        let (p, j) = (t / PANEL, t % PANEL);
                        for (c, &x) in row.iter().enumerate() {
                            let at = o + ((p * pairs + c / 2) * PANEL + j) * 2 + c % 2;
                            for (p, v) in self.pieces.iter_mut().zip(convert(x, mode)).take(count) {
                                p[at] = v;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Rows of bf16 weights (`w`, `[rows ≤ ROW_BLOCK, cols]` as bits) against one group's
/// converted inputs, laid out as `at` says: the dot tiles for rows, the outer-product
/// kernel for panels. `out` gets `[n, rows]` through [`Out::set`](super::Out).
///
/// # Safety
/// [`available`] must be true; `acts` must have been filled for a group of `n` rows with
/// `acts.cols` columns, `at` being that group's layout, and `w.len()` a multiple of
/// `acts.cols` holding at most [`super::ROW_BLOCK`] rows; panels need an even `cols`;
/// `out` may write rows `< w.len() / cols` for tokens `< n` (the contract of `Out::set`).
pub(super) unsafe fn run_block(w: &[u16], acts: &Bf16Acts, at: Layout, n: usize, out: super::Out) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract, passed on.
    unsafe {
        kernels::run_block(w, acts, at, n, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (w, acts, at, n, out);
        unreachable!("bf16 kernels: `available` is false off x86-64");
    }
}

#[cfg(target_arch = "x86_64")]
mod kernels {
    use super::super::{Out, ROW_BLOCK};
    use super::{Bf16Acts, Bf16Mode, Layout, PANEL};
    use std::arch::x86_64::*;

    /// See [`super::run_block`]; the same contract.
    pub(super) unsafe fn run_block(w: &[u16], acts: &Bf16Acts, at: Layout, n: usize, out: Out) {
        let cols = acts.cols;
        let count = acts.mode.map_or(0, super::pieces);
        assert!(
            cols > 0 && w.len().is_multiple_of(cols) && count > 0,
            "bf16 kernels: rows"
        );
        let rows = w.len() / cols;
        assert!(rows <= ROW_BLOCK, "bf16 kernels: row block");
        // SAFETY (both arms): the CPU features are the caller's contract (`available`);
        // the slices handed on were bounds-checked here, and `out` is the caller's.
        match at {
            Layout::Rows(o) => {
                let x: [&[u16]; 3] = std::array::from_fn(|k| {
                    let p = &acts.pieces[k.min(count - 1)];
                    &p[o..o + n * cols]
                });
                unsafe { dot_tiles(w, cols, &x[..count], n, out) }
            }
            Layout::Panels(o) => {
                assert!(
                    cols.is_multiple_of(2) && acts.mode == Some(Bf16Mode::Round),
                    "bf16 kernels: panels need even columns and rounded activations"
                );
                let len = n.div_ceil(PANEL) * cols * PANEL;
                unsafe { panel_block(w, cols, &acts.pieces[0][o..o + len], n, out) }
            }
        }
    }

    /// 32 bf16 at `p` as the instruction's operand type (`__m512bh` and `__m512i` are
    /// both 64-byte vectors, so the transmute only renames the bits).
    ///
    /// # Safety
    /// `p .. p + 32` must be readable; AVX-512F available.
    #[inline(always)]
    unsafe fn load32(p: *const u16) -> __m512bh {
        // SAFETY: the caller's contract; the load is unaligned.
        unsafe { std::mem::transmute(_mm512_loadu_si512(p as *const __m512i)) }
    }

    /// The first `k < 32` bf16 at `p`, the rest zero. A masked load reads nothing where the
    /// mask is clear, so only `p .. p + k` must be readable.
    ///
    /// # Safety
    /// `p .. p + k` readable; AVX-512BW available.
    #[inline(always)]
    unsafe fn load_first(p: *const u16, k: usize) -> __m512bh {
        let mask: __mmask32 = (1u32 << k) - 1;
        // SAFETY: the caller's contract; masked-off elements are not accessed.
        unsafe { std::mem::transmute(_mm512_maskz_loadu_epi16(mask, p as *const i16)) }
    }

    /// Rows in groups of up to 4, tokens in groups of up to 4: a 4×4 tile holds 16
    /// accumulators, 4 weight vectors and 4 input vectors in the 32 zmm registers.
    ///
    /// # Safety
    /// AVX-512F/BW/BF16 available; `w` is `[rows, cols]`, each of the 1 to 3 pieces `x`
    /// `[n, cols]`; `out` may write rows `< rows` for tokens `< n`.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn dot_tiles(w: &[u16], cols: usize, x: &[&[u16]], n: usize, out: Out) {
        let rows = w.len() / cols;
        if n == 1 {
            // SAFETY: the same contract, for one token.
            unsafe { decode_rows(w, cols, x, out) };
            return;
        }
        let mut r = 0;
        while r < rows {
            let rn = (rows - r).min(4);
            let mut t = 0;
            while t < n {
                let tn = (n - t).min(4);
                let args = (w, cols, x, out, r, t);
                // SAFETY: rows r..r+rn ≤ rows and tokens t..t+tn ≤ n exist in the slices,
                // and the tile writes only those rows and tokens; features as above.
                unsafe {
                    match (rn, tn) {
                        (4, 4) => tile::<4, 4>(args),
                        (4, 3) => tile::<4, 3>(args),
                        (4, 2) => tile::<4, 2>(args),
                        (4, 1) => tile::<4, 1>(args),
                        (3, 4) => tile::<3, 4>(args),
                        (3, 3) => tile::<3, 3>(args),
                        (3, 2) => tile::<3, 2>(args),
                        (3, 1) => tile::<3, 1>(args),
                        (2, 4) => tile::<2, 4>(args),
                        (2, 3) => tile::<2, 3>(args),
                        (2, 2) => tile::<2, 2>(args),
                        (2, 1) => tile::<2, 1>(args),
                        (1, 4) => tile::<1, 4>(args),
                        (1, 3) => tile::<1, 3>(args),
                        (1, 2) => tile::<1, 2>(args),
                        _ => tile::<1, 1>(args),
                    }
                }
                t += tn;
            }
            r += rn;
        }
    }

    /// Decode: each row against the one token, the rows one after another, so a task reads
    /// its block of rows front to back as one stream (tiles of 4 rows read 4 streams a page
    /// apart, which the bench's read probe measures slower than one stream). Four
    /// accumulators per row cover the instruction's latency.
    ///
    /// # Safety
    /// As for [`dot_tiles`] with `n == 1`.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn decode_rows(w: &[u16], cols: usize, x: &[&[u16]], out: Out) {
        let rows = w.len() / cols;
        let wide = cols / 128 * 128;
        let main = cols / 32 * 32;
        for r in 0..rows {
            let wp = w[r * cols..].as_ptr();
            let mut acc = [_mm512_setzero_ps(); 4];
            let mut c = 0;
            while c < wide {
                // SAFETY: c + 128 ≤ cols: four 32-element loads inside row r.
                let wv: [__m512bh; 4] =
                    std::array::from_fn(|k| unsafe { load32(wp.add(c + 32 * k)) });
                for piece in x {
                    // SAFETY: the token's piece has `cols` elements.
                    let xv: [__m512bh; 4] =
                        std::array::from_fn(|k| unsafe { load32(piece.as_ptr().add(c + 32 * k)) });
                    for k in 0..4 {
                        acc[k] = _mm512_dpbf16_ps(acc[k], wv[k], xv[k]);
                    }
                }
                c += 128;
            }
            while c < cols {
                let k = (cols - c).min(32);
                // SAFETY: k elements from column c lie inside the row and each piece; a
                // full vector when c < main, a masked load for the tail.
                let wv = unsafe {
                    if c < main {
                        load32(wp.add(c))
                    } else {
                        load_first(wp.add(c), k)
                    }
                };
                for piece in x {
                    // SAFETY: as above.
                    let xv = unsafe {
                        if c < main {
                            load32(piece.as_ptr().add(c))
                        } else {
                            load_first(piece.as_ptr().add(c), k)
                        }
                    };
                    acc[0] = _mm512_dpbf16_ps(acc[0], wv, xv);
                }
                c += 32;
            }
            let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            // SAFETY: row r < rows and token 0 < n = 1: the contract of `Out::set`.
            unsafe { out.set(0, r, _mm512_reduce_add_ps(sum)) };
        }
    }

    type TileArgs<'a> = (&'a [u16], usize, &'a [&'a [u16]], Out, usize, usize);

    /// One R×T tile of dot products, 32 columns (one cache line of each weight row) a
    /// step: `acc += w·x` by `vdpbf16ps` for each piece of `x`, the `cols % 32` tail by
    /// masked loads.
    ///
    /// # Safety
    /// As for [`dot_tiles`], rows `r..r+R` and tokens `t..t+T` existing.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn tile<const R: usize, const T: usize>(args: TileArgs) {
        let (w, cols, x, out, r, t) = args;
        let wp = w.as_ptr();
        let mut acc = [[_mm512_setzero_ps(); T]; R];
        let main = cols / 32 * 32;
        let mut c = 0;
        while c < main {
            // No software prefetch: on the bench's probe matrix, prefetching the next tile's
            // rows or lines ahead in these rows read slower than the hardware prefetcher.
            // SAFETY: rows r+i exist and c + 32 ≤ cols.
            let wv: [__m512bh; R] =
                std::array::from_fn(|i| unsafe { load32(wp.add((r + i) * cols + c)) });
            for piece in x {
                // SAFETY: tokens t+j exist in every piece and c + 32 ≤ cols.
                let xv: [__m512bh; T] = std::array::from_fn(|j| unsafe {
                    load32(piece.as_ptr().add((t + j) * cols + c))
                });
                step(&mut acc, wv, xv);
            }
            c += 32;
        }
        if main < cols {
            let k = cols - main;
            // SAFETY: k < 32 elements from column `main` lie inside each row.
            let wv: [__m512bh; R] =
                std::array::from_fn(|i| unsafe { load_first(wp.add((r + i) * cols + main), k) });
            for piece in x {
                // SAFETY: as above, in each piece.
                let xv: [__m512bh; T] = std::array::from_fn(|j| unsafe {
                    load_first(piece.as_ptr().add((t + j) * cols + main), k)
                });
                step(&mut acc, wv, xv);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            for (j, v) in a.iter().enumerate() {
                // SAFETY: row r+i < rows and token t+j < n: the contract of `Out::set`.
                unsafe { out.set(t + j, r + i, _mm512_reduce_add_ps(*v)) };
            }
        }
    }

    /// `acc[i][j] += w_i · x_j` over 32 columns, by pairs.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    fn step<const R: usize, const T: usize>(
        acc: &mut [[__m512; T]; R],
        wv: [__m512bh; R],
        x: [__m512bh; T],
    ) {
        for (a, wi) in acc.iter_mut().zip(&wv) {
            for (aj, xj) in a.iter_mut().zip(&x) {
                *aj = _mm512_dpbf16_ps(*aj, *wi, *xj);
            }
        }
    }

    /// Rows of `w` against panels of [`PANEL`] tokens as outer products: a step of the
    /// 8-row × 32-token tile broadcasts one weight pair of each row (one 32-bit lane) and
    /// multiplies it into the 32 tokens' column pairs (two vectors).
    /// Pairs go in blocks of KP, the accumulators parked in `acc` between blocks, so the
    /// panel's block stays in L1 for every 8-row micro-panel (as in `x86::gemm_block`).
    ///
    /// # Safety
    /// AVX-512F/BW/BF16 available; `cols` even; `w` is `[rows, cols]`; `x` holds
    /// `ceil(n / PANEL)` panels of `cols / 2` pairs; `out` may write rows `< rows` for
    /// tokens `< n`.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn panel_block(w: &[u16], cols: usize, x: &[u16], n: usize, out: Out) {
        const MR: usize = 8;
        const KP: usize = 64;
        let pairs = cols / 2;
        let nr = w.len() / cols;
        let micro = nr.div_ceil(MR);
        let mut acc = [[_mm512_setzero_ps(); 2]; ROW_BLOCK.div_ceil(MR) * MR];
        for p in 0..n.div_ceil(PANEL) {
            let base = p * pairs * PANEL * 2;
            let hp = x[base..].as_ptr();
            let tokens = (n - p * PANEL).min(PANEL);
            acc.fill([_mm512_setzero_ps(); 2]);
            for k0 in (0..pairs).step_by(KP) {
                for m in 0..micro {
                    // Rows past the block's last repeat it; their sums are never stored.
                    let rowp: [*const u16; MR] =
                        std::array::from_fn(|i| w[(m * MR + i).min(nr - 1) * cols..].as_ptr());
                    let mut a = [[_mm512_setzero_ps(); 2]; MR];
                    a.copy_from_slice(&acc[m * MR..(m + 1) * MR]);
                    for k in k0..(k0 + KP).min(pairs) {
                        // SAFETY: pair k of the panel is 64 elements at k·64 (< pairs·64).
                        let (x0, x1) =
                            unsafe { (load32(hp.add(k * 64)), load32(hp.add(k * 64 + 32))) };
                        for (ai, rp) in a.iter_mut().zip(&rowp) {
                            // SAFETY: columns 2k, 2k+1 < cols of a row of `w`; the read is
                            // unaligned (rows are 2-byte aligned).
                            let pair = unsafe { (rp.add(2 * k) as *const i32).read_unaligned() };
                            // SAFETY: same-size vectors: the transmute renames the bits.
                            let b: __m512bh =
                                unsafe { std::mem::transmute(_mm512_set1_epi32(pair)) };
                            ai[0] = _mm512_dpbf16_ps(ai[0], b, x0);
                            ai[1] = _mm512_dpbf16_ps(ai[1], b, x1);
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
                    // SAFETY: row i < rows and token p·PANEL + j < n: `Out::set`'s contract.
                    unsafe { out.set(p * PANEL + j, i, v) };
                }
            }
        }
    }
}
