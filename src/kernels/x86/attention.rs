//! The attention kernels of `x86.rs`, each in AVX-512 and AVX2 forms: one query position
//! against a KV cache (`attention.rs`'s `attend`) and the register tiles of a block of
//! positions (`attention_block.rs`). Each entry point declines when the CPU lacks
//! what its kernels need, so the caller's portable code runs; the callers' tests pin every
//! path to `attend_reference`.

use super::super::{KvHead, softmax_in_place};
use super::{hsum8, prefetch_lines, use_avx512};
use std::arch::x86_64::*;
use std::ops::Range;

/// [`attend_avx512`] when the CPU has AVX-512 (and `ANATOMY_NO_AVX512` is unset) and `d`
/// is a multiple of 16, else [`attend_avx2`] when it has AVX2 and FMA and `d` is a
/// multiple of 8; returns false, having done nothing, otherwise.
///
/// # Safety
/// `q.len() == out.len()` is a multiple of `d`, and rows `span` of `kv` lie inside
/// `kv.keys` and `kv.values` (what `attend` asserts).
pub(in crate::kernels) unsafe fn attend(
    q: &[f32],
    d: usize,
    kv: KvHead,
    span: Range<usize>,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) -> bool {
    let avx512 = d.is_multiple_of(16) && use_avx512();
    let avx2 = d.is_multiple_of(8) && crate::kernels::policy::cpu().avx2_fma();
    if !(avx512 || avx2) {
        return false;
    }
    scores.resize(q.len() / d * span.len(), 0.0);
    // SAFETY: the kernel's CPU features were checked just above (AVX-512F by `use_avx512`,
    // else AVX2 and FMA), `d` is a multiple of its width, `scores` was just sized to
    // heads · span, and the caller keeps every row the kernel reads inside `keys` and
    // `values`.
    unsafe {
        if avx512 {
            attend_avx512(q, d, kv, span, scale, scores, out)
        } else {
            attend_avx2(q, d, kv, span, scale, scores, out)
        }
    };
    true
}

/// [`attend_avx512`] with 8-lane registers, for CPUs without AVX-512: the same order of
/// work (each key row read once for the whole group of heads, values summed 64 columns at
/// a time in eight registers, positions in order).
///
/// # Safety
/// AVX2 and FMA must be available, `d % 8 == 0`, `scores.len() == heads · span.len()`,
/// and rows `span` of `kv` must lie inside `kv.keys` and `kv.values`.
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2(
    q: &[f32],
    d: usize,
    kv: KvHead,
    span: Range<usize>,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let len = span.len();
    let (kp, vp) = (kv.keys.as_ptr(), kv.values.as_ptr());
    // Rows of one head among others' are a strided pattern; contiguous ones need no help.
    let ahead = if kv.stride > d { KV_AHEAD } else { 0 };
    for (jj, j) in span.clone().enumerate() {
        // SAFETY: row j lies inside `keys` (the caller's contract).
        let k = unsafe { kp.add(j * kv.stride + kv.offset) };
        if ahead > 0 {
            prefetch_row(kp, (j + ahead) * kv.stride + kv.offset, d);
        }
        for (h, qh) in q.chunks_exact(d).enumerate() {
            let mut acc = [_mm256_setzero_ps(); 2];
            for c in (0..d).step_by(8) {
                // SAFETY: c + 8 ≤ d, inside row j of keys and head h of q.
                let (k8, q8) = unsafe {
                    (
                        _mm256_loadu_ps(k.add(c)),
                        _mm256_loadu_ps(qh.as_ptr().add(c)),
                    )
                };
                let a = &mut acc[(c / 8) % 2];
                *a = _mm256_fmadd_ps(k8, q8, *a);
            }
            scores[h * len + jj] = hsum8(_mm256_add_ps(acc[0], acc[1])) * scale;
        }
    }
    for s in scores.chunks_exact_mut(len.max(1)) {
        softmax_in_place(s);
    }
    for (h, o) in out.chunks_exact_mut(d).enumerate() {
        let p = &scores[h * len..(h + 1) * len];
        for c0 in (0..d).step_by(64) {
            let nv = ((d - c0) / 8).min(8);
            let mut acc = [_mm256_setzero_ps(); 8];
            for (jj, j) in span.clone().enumerate() {
                let pj = _mm256_set1_ps(p[jj]);
                if ahead > 0 {
                    prefetch_row(vp, (j + ahead) * kv.stride + kv.offset + c0, 8 * nv);
                }
                // SAFETY: row j lies inside `values` (the caller's contract).
                let v = unsafe { vp.add(j * kv.stride + kv.offset + c0) };
                for (u, a) in acc.iter_mut().enumerate().take(nv) {
                    // SAFETY: c0 + 8u + 8 ≤ d, inside row j.
                    *a = _mm256_fmadd_ps(pj, unsafe { _mm256_loadu_ps(v.add(8 * u)) }, *a);
                }
            }
            for (u, a) in acc.iter().enumerate().take(nv) {
                // SAFETY: c0 + 8u + 8 ≤ d = o.len().
                unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(c0 + 8 * u), *a) };
            }
        }
    }
}

/// Cached positions ahead of the one being read whose rows the decode kernel asks for when
/// a head's rows are `d` of every `stride` floats, a pattern the prefetchers follow late.
const KV_AHEAD: usize = 8;

/// Asks for the `floats` floats at `at` floats past `base` (which may lie past the cache:
/// a prefetch never faults).
#[inline(always)]
fn prefetch_row(base: *const f32, at: usize, floats: usize) {
    prefetch_lines(base.wrapping_add(at) as *const u8, 4 * floats);
}

// ------------------------------------------------------------------ attention

/// [`attend_reference`](crate::kernels::attention::attend_reference) with AVX-512 FMAs: each key
/// row is read once for all the heads of the group, the scores of all heads are kept
/// (`scores` is `[heads, span]`), and each head's weighted values are summed 128 columns
/// at a time in registers.
///
/// # Safety
/// AVX-512F must be available, `d % 16 == 0`, `scores.len() == heads · span.len()`, and
/// rows `span` of `kv` must lie inside `kv.keys` and `kv.values`.
#[target_feature(enable = "avx512f")]
unsafe fn attend_avx512(
    q: &[f32],
    d: usize,
    kv: KvHead,
    span: Range<usize>,
    scale: f32,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let len = span.len();
    let (kp, vp) = (kv.keys.as_ptr(), kv.values.as_ptr());
    let ahead = if kv.stride > d { KV_AHEAD } else { 0 };
    // Scores: every head against key j, the key read once.
    for (jj, j) in span.clone().enumerate() {
        // SAFETY: row j lies inside `keys` (the caller's contract).
        let k = unsafe { kp.add(j * kv.stride + kv.offset) };
        if ahead > 0 {
            prefetch_row(kp, (j + ahead) * kv.stride + kv.offset, d);
        }
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
                if ahead > 0 {
                    prefetch_row(vp, (j + ahead) * kv.stride + kv.offset + c0, 16 * nv);
                }
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

/// [`block_scores_avx512`] when the CPU has AVX-512 (and `ANATOMY_NO_AVX512` is unset),
/// else [`block_scores_avx2`] when it has AVX2 and FMA; returns false, having done
/// nothing, otherwise or under `ANATOMY_PORTABLE_MATMUL`.
///
/// # Safety
/// `qt` is `[d, rp]` with `rp` a multiple of 16, `st` is `[keys.len(), rp]`, and rows
/// `keys` of `kv` lie inside `kv.keys` (`offset + d ≤ stride`).
pub(in crate::kernels) unsafe fn block_scores(
    qt: &[f32],
    d: usize,
    kv: KvHead,
    keys: Range<usize>,
    scale: f32,
    st: &mut [f32],
) -> bool {
    let policy = super::super::policy::current();
    if policy.portable_matmul() {
        return false;
    }
    if use_avx512() {
        // SAFETY: AVX-512F is available; the rest is the caller's contract.
        unsafe { block_scores_avx512(qt, d, kv, keys, scale, st) };
    } else if super::super::policy::cpu().avx2_fma() {
        // SAFETY: AVX2 and FMA are available; `rp`, a multiple of 16, is one of 8.
        unsafe { block_scores_avx2(qt, d, kv, keys, scale, st) };
    } else {
        return false;
    }
    true
}

/// [`block_values_avx512`] when the CPU has AVX-512 (and `ANATOMY_NO_AVX512` is unset)
/// and `d` is a multiple of 16, else [`block_values_avx2`] when it has AVX2 and FMA and
/// `d` is a multiple of 8; returns false, having done nothing, otherwise or under
/// `ANATOMY_PORTABLE_MATMUL`.
///
/// # Safety
/// `p` is `[keys.len(), rp]` and `alpha` `[rp]` with `rows ≤ rp`, `acc` is `[rp, d]`, and
/// rows `keys` of `kv` lie inside `kv.values` (`offset + d ≤ stride`).
pub(in crate::kernels) unsafe fn block_values(
    p: &[f32],
    alpha: &[f32],
    kv: KvHead,
    keys: Range<usize>,
    rows: usize,
    acc: &mut [f32],
) -> bool {
    let d = acc.len() / alpha.len().max(1);
    if super::super::policy::current().portable_matmul() {
        return false;
    }
    if d.is_multiple_of(16) && use_avx512() {
        // SAFETY: AVX-512F is available and d is a multiple of 16; the rest is the caller's.
        unsafe { block_values_avx512(p, alpha, kv, keys, rows, acc) };
    } else if d.is_multiple_of(8) && super::super::policy::cpu().avx2_fma() {
        // SAFETY: AVX2 and FMA are available and d is a multiple of 8; the rest is the
        // caller's contract.
        unsafe { block_values_avx2(p, alpha, kv, keys, rows, acc) };
    } else {
        return false;
    }
    true
}

/// The scores of a block of query rows (chapter 10's `attend_block`): `st[j, r] = scale ·
/// Σ_c k_j[c] · qt[c, r]`, four keys and up to 64 rows per register tile, so each key
/// element is broadcast once per tile and no lane sum is needed.
///
/// # Safety
/// AVX-512F must be available, and the shapes those of [`block_scores`].
#[target_feature(enable = "avx512f")]
unsafe fn block_scores_avx512(
    qt: &[f32],
    d: usize,
    kv: KvHead,
    keys: Range<usize>,
    scale: f32,
    st: &mut [f32],
) {
    let rp = qt.len() / d;
    let vectors = rp / 16;
    let mut jj = 0;
    while jj < keys.len() {
        let kb = if keys.len() - jj >= 4 { 4 } else { 1 };
        for v0 in (0..vectors).step_by(4) {
            let tile = ScoreTile {
                qt,
                d,
                rp,
                kv,
                key: keys.start + jj,
                v0,
                scale,
            };
            let out = &mut st[jj * rp..];
            // SAFETY: keys key..key+kb are rows of `keys`, the vectors v0..v0+nv are
            // inside rp, and `out` holds kb rows of rp (the caller's shapes).
            unsafe {
                match (kb, (vectors - v0).min(4)) {
                    (4, 4) => tile.run::<4, 4>(out),
                    (4, 3) => tile.run::<4, 3>(out),
                    (4, 2) => tile.run::<4, 2>(out),
                    (4, _) => tile.run::<4, 1>(out),
                    (_, 4) => tile.run::<1, 4>(out),
                    (_, 3) => tile.run::<1, 3>(out),
                    (_, 2) => tile.run::<1, 2>(out),
                    (_, _) => tile.run::<1, 1>(out),
                }
            }
        }
        jj += kb;
    }
}

/// One register tile of [`block_scores_avx512`]: keys `key..key + KB` against the query
/// vectors `v0..v0 + NV` (16 rows each).
#[derive(Clone, Copy)]
struct ScoreTile<'a> {
    qt: &'a [f32],
    d: usize,
    rp: usize,
    kv: KvHead<'a>,
    key: usize,
    v0: usize,
    scale: f32,
}

impl ScoreTile<'_> {
    /// # Safety
    /// AVX-512F must be available; keys `key..key + KB` lie inside `kv.keys`, vectors
    /// `v0..v0 + NV` inside the `rp` rows of `qt`, and `out` holds `KB` rows of `rp`.
    #[target_feature(enable = "avx512f")]
    unsafe fn run<const KB: usize, const NV: usize>(self, out: &mut [f32]) {
        let mut acc = [[_mm512_setzero_ps(); NV]; KB];
        let k: [*const f32; KB] = std::array::from_fn(|i| {
            // SAFETY: key + i is a row inside kv.keys (the contract).
            unsafe {
                self.kv
                    .keys
                    .as_ptr()
                    .add((self.key + i) * self.kv.stride + self.kv.offset)
            }
        });
        let q = self.qt.as_ptr();
        for c in 0..self.d {
            // SAFETY: c < d rows of qt, vectors v0 + u < rp / 16; element c of each key row.
            unsafe {
                let qv: [__m512; NV] = std::array::from_fn(|u| {
                    _mm512_loadu_ps(q.add(c * self.rp + (self.v0 + u) * 16))
                });
                for (i, row) in acc.iter_mut().enumerate() {
                    let kc = _mm512_set1_ps(*k[i].add(c));
                    for (a, &qu) in row.iter_mut().zip(&qv) {
                        *a = _mm512_fmadd_ps(kc, qu, *a);
                    }
                }
            }
        }
        let scale = _mm512_set1_ps(self.scale);
        for (i, row) in acc.iter().enumerate() {
            for (u, a) in row.iter().enumerate() {
                // SAFETY: row i < KB of `out`, vector v0 + u inside its rp floats.
                unsafe {
                    let at = out.as_mut_ptr().add(i * self.rp + (self.v0 + u) * 16);
                    _mm512_storeu_ps(at, _mm512_mul_ps(*a, scale));
                }
            }
        }
    }
}

/// `acc[r] = alpha[r] · acc[r] + Σ_j p[j, r] · v_j` for the rows `r < rows`: register
/// tiles of four rows by 64 columns, so each value vector loaded serves four rows.
///
/// # Safety
/// AVX-512F must be available, `d % 16 == 0`, and the shapes those of [`block_values`].
#[target_feature(enable = "avx512f")]
unsafe fn block_values_avx512(
    p: &[f32],
    alpha: &[f32],
    kv: KvHead,
    keys: Range<usize>,
    rows: usize,
    acc: &mut [f32],
) {
    let rp = alpha.len();
    let d = acc.len() / rp;
    for r0 in (0..rows).step_by(4) {
        for c0 in (0..d).step_by(64) {
            let tile = ValueTile {
                p,
                alpha,
                kv,
                keys: keys.clone(),
                r0,
                c0,
                d,
            };
            // SAFETY: rows r0..r0+rb ≤ rows ≤ rp, vectors c0/16..c0/16+nv ≤ d/16, and the
            // caller's contract for the value rows.
            unsafe {
                match ((rows - r0).min(4), ((d - c0) / 16).min(4)) {
                    (4, 4) => tile.run::<4, 4>(acc),
                    (4, 3) => tile.run::<4, 3>(acc),
                    (4, 2) => tile.run::<4, 2>(acc),
                    (4, _) => tile.run::<4, 1>(acc),
                    (3, 4) => tile.run::<3, 4>(acc),
                    (3, 3) => tile.run::<3, 3>(acc),
                    (3, 2) => tile.run::<3, 2>(acc),
                    (3, _) => tile.run::<3, 1>(acc),
                    (2, 4) => tile.run::<2, 4>(acc),
                    (2, 3) => tile.run::<2, 3>(acc),
                    (2, 2) => tile.run::<2, 2>(acc),
                    (2, _) => tile.run::<2, 1>(acc),
                    (_, 4) => tile.run::<1, 4>(acc),
                    (_, 3) => tile.run::<1, 3>(acc),
                    (_, 2) => tile.run::<1, 2>(acc),
                    (_, _) => tile.run::<1, 1>(acc),
                }
            }
        }
    }
}

/// One register tile of [`block_values_avx512`]: rows `r0..r0 + RB`, columns
/// `c0..c0 + 16·NV`.
struct ValueTile<'a> {
    p: &'a [f32],
    alpha: &'a [f32],
    kv: KvHead<'a>,
    keys: Range<usize>,
    r0: usize,
    c0: usize,
    d: usize,
}

impl ValueTile<'_> {
    /// # Safety
    /// AVX-512F must be available; rows `r0..r0 + RB` of `acc` (`[alpha.len(), d]`) and
    /// of `p`'s columns exist, `c0 + 16·NV ≤ d`, and rows `keys` lie inside `kv.values`.
    #[target_feature(enable = "avx512f")]
    unsafe fn run<const RB: usize, const NV: usize>(&self, acc: &mut [f32]) {
        let rp = self.alpha.len();
        let at = |i: usize, u: usize| (self.r0 + i) * self.d + self.c0 + 16 * u;
        let mut a = [[_mm512_setzero_ps(); NV]; RB];
        for (i, row) in a.iter_mut().enumerate() {
            let scale = _mm512_set1_ps(self.alpha[self.r0 + i]);
            for (u, x) in row.iter_mut().enumerate() {
                // SAFETY: row r0 + i of acc, columns c0 + 16u .. + 16 ≤ d.
                *x = _mm512_mul_ps(scale, unsafe {
                    _mm512_loadu_ps(acc.as_ptr().add(at(i, u)))
                });
            }
        }
        let vp = self.kv.values.as_ptr();
        for (jj, j) in self.keys.clone().enumerate() {
            // SAFETY: row j lies inside `values`, and c0 + 16·NV ≤ d ≤ stride − offset.
            let v: [__m512; NV] = std::array::from_fn(|u| unsafe {
                _mm512_loadu_ps(vp.add(j * self.kv.stride + self.kv.offset + self.c0 + 16 * u))
            });
            let pj = &self.p[jj * rp + self.r0..][..RB];
            for (row, &w) in a.iter_mut().zip(pj) {
                let w = _mm512_set1_ps(w);
                for (x, &vu) in row.iter_mut().zip(&v) {
                    *x = _mm512_fmadd_ps(w, vu, *x);
                }
            }
        }
        for (i, row) in a.iter().enumerate() {
            for (u, x) in row.iter().enumerate() {
                // SAFETY: as for the loads above.
                unsafe { _mm512_storeu_ps(acc.as_mut_ptr().add(at(i, u)), *x) };
            }
        }
    }
}

/// [`block_scores_avx512`] in 8-lane registers: four keys by 16 query rows per register
/// tile (8 accumulators), each sum over the columns in order with one FMA a step, as
/// there.
///
/// # Safety
/// AVX2 and FMA must be available, and the shapes those of [`block_scores`].
#[target_feature(enable = "avx2,fma")]
unsafe fn block_scores_avx2(
    qt: &[f32],
    d: usize,
    kv: KvHead,
    keys: Range<usize>,
    scale: f32,
    st: &mut [f32],
) {
    let rp = qt.len() / d;
    let mut jj = 0;
    while jj < keys.len() {
        let kb = if keys.len() - jj >= 4 { 4 } else { 1 };
        for v0 in (0..rp / 8).step_by(2) {
            let key = keys.start + jj;
            let out = &mut st[jj * rp..];
            // SAFETY: keys key..key+kb are rows of `keys`, vectors v0, v0 + 1 are inside
            // rp (a multiple of 16), and `out` holds kb rows of rp (the caller's shapes).
            unsafe {
                if kb == 4 {
                    scores8::<4>(qt, d, rp, kv, key, v0, scale, out)
                } else {
                    scores8::<1>(qt, d, rp, kv, key, v0, scale, out)
                }
            }
        }
        jj += kb;
    }
}

/// One register tile of [`block_scores_avx2`]: keys `key..key + KB` against the query
/// vectors `v0`, `v0 + 1` (8 rows each).
///
/// # Safety
/// AVX2 and FMA must be available; keys `key..key + KB` lie inside `kv.keys`, vectors
/// `v0 + 1` inside the `rp` rows of `qt`, and `out` holds `KB` rows of `rp`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn scores8<const KB: usize>(
    qt: &[f32],
    d: usize,
    rp: usize,
    kv: KvHead,
    key: usize,
    v0: usize,
    scale: f32,
    out: &mut [f32],
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; KB];
    // SAFETY: key + i is a row inside kv.keys (the contract).
    let k: [*const f32; KB] =
        std::array::from_fn(|i| unsafe { kv.keys.as_ptr().add((key + i) * kv.stride + kv.offset) });
    let q = qt.as_ptr();
    for c in 0..d {
        // SAFETY: c < d rows of qt, vectors v0, v0 + 1 < rp / 8; element c of each key row.
        unsafe {
            let q0 = _mm256_loadu_ps(q.add(c * rp + v0 * 8));
            let q1 = _mm256_loadu_ps(q.add(c * rp + v0 * 8 + 8));
            for (row, kr) in acc.iter_mut().zip(&k) {
                let kc = _mm256_set1_ps(*kr.add(c));
                row[0] = _mm256_fmadd_ps(kc, q0, row[0]);
                row[1] = _mm256_fmadd_ps(kc, q1, row[1]);
            }
        }
    }
    let scale = _mm256_set1_ps(scale);
    for (i, row) in acc.iter().enumerate() {
        for (u, a) in row.iter().enumerate() {
            // SAFETY: row i < KB of `out`, vector v0 + u inside its rp floats.
            unsafe {
                let at = out.as_mut_ptr().add(i * rp + (v0 + u) * 8);
                _mm256_storeu_ps(at, _mm256_mul_ps(*a, scale));
            }
        }
    }
}

/// [`block_values_avx512`] in 8-lane registers: register tiles of four rows by 16 columns
/// (8 accumulators), so each pair of value vectors loaded serves four rows.
///
/// # Safety
/// AVX2 and FMA must be available, `d % 8 == 0`, and the shapes those of [`block_values`].
#[target_feature(enable = "avx2,fma")]
unsafe fn block_values_avx2(
    p: &[f32],
    alpha: &[f32],
    kv: KvHead,
    keys: Range<usize>,
    rows: usize,
    acc: &mut [f32],
) {
    let rp = alpha.len();
    let d = acc.len() / rp;
    for r0 in (0..rows).step_by(4) {
        for c0 in (0..d).step_by(16) {
            let tile = ValueTile {
                p,
                alpha,
                kv,
                keys: keys.clone(),
                r0,
                c0,
                d,
            };
            // SAFETY: rows r0..r0+rb ≤ rows ≤ rp, columns c0..c0 + 8·nv ≤ d, and the
            // caller's contract for the value rows.
            unsafe {
                match ((rows - r0).min(4), ((d - c0) / 8).min(2)) {
                    (4, 2) => tile.run8::<4, 2>(acc),
                    (4, _) => tile.run8::<4, 1>(acc),
                    (3, 2) => tile.run8::<3, 2>(acc),
                    (3, _) => tile.run8::<3, 1>(acc),
                    (2, 2) => tile.run8::<2, 2>(acc),
                    (2, _) => tile.run8::<2, 1>(acc),
                    (_, 2) => tile.run8::<1, 2>(acc),
                    (_, _) => tile.run8::<1, 1>(acc),
                }
            }
        }
    }
}

impl ValueTile<'_> {
    /// [`ValueTile::run`] in 8-lane registers: rows `r0..r0 + RB`, columns
    /// `c0..c0 + 8·NV`.
    ///
    /// # Safety
    /// AVX2 and FMA must be available; rows `r0..r0 + RB` of `acc` (`[alpha.len(), d]`)
    /// and of `p`'s columns exist, `c0 + 8·NV ≤ d`, and rows `keys` lie inside
    /// `kv.values`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run8<const RB: usize, const NV: usize>(&self, acc: &mut [f32]) {
        let rp = self.alpha.len();
        let at = |i: usize, u: usize| (self.r0 + i) * self.d + self.c0 + 8 * u;
        let mut a = [[_mm256_setzero_ps(); NV]; RB];
        for (i, row) in a.iter_mut().enumerate() {
            let scale = _mm256_set1_ps(self.alpha[self.r0 + i]);
            for (u, x) in row.iter_mut().enumerate() {
                // SAFETY: row r0 + i of acc, columns c0 + 8u .. + 8 ≤ d.
                *x = _mm256_mul_ps(scale, unsafe {
                    _mm256_loadu_ps(acc.as_ptr().add(at(i, u)))
                });
            }
        }
        let vp = self.kv.values.as_ptr();
        for (jj, j) in self.keys.clone().enumerate() {
            // SAFETY: row j lies inside `values`, and c0 + 8·NV ≤ d ≤ stride − offset.
            let v: [__m256; NV] = std::array::from_fn(|u| unsafe {
                _mm256_loadu_ps(vp.add(j * self.kv.stride + self.kv.offset + self.c0 + 8 * u))
            });
            let pj = &self.p[jj * rp + self.r0..][..RB];
            for (row, &w) in a.iter_mut().zip(pj) {
                let w = _mm256_set1_ps(w);
                for (x, &vu) in row.iter_mut().zip(&v) {
                    *x = _mm256_fmadd_ps(w, vu, *x);
                }
            }
        }
        for (i, row) in a.iter().enumerate() {
            for (u, x) in row.iter().enumerate() {
                // SAFETY: as for the loads above.
                unsafe { _mm256_storeu_ps(acc.as_mut_ptr().add(at(i, u)), *x) };
            }
        }
    }
}
