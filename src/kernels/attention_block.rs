//! Prefill attention a block of consecutive query positions at a time (chapter 10).
//!
//! [`attend`](super::attention::attend) serves one position: at a long context every
//! position re-reads the whole key and value cache of its span, and the run is bound by
//! those reads, not by arithmetic. [`attend_block`] serves `positions` consecutive
//! positions of one KV head's query heads per pass over the keys, as flash attention
//! does: each key and value row is read once per block, the softmax is taken online
//! (a running maximum and sum per query row, the partial output rescaled when the
//! maximum grows), so scratch stays one tile of [`TILE`] keys whatever the span.
//!
//! The layout avoids a horizontal sum per key: the block's query rows are transposed
//! (`qt[c, r]`), so a key's scores for all rows are one vector sum of `k_j[c] · qt[c, ·]`,
//! and the scores, maxima and sums are vectors over the query rows (`st[j, r]`, the
//! column passes of [`exp`](super::exp)). The AVX-512 kernels of `x86.rs` score four
//! keys per step and accumulate each row's output in registers; without AVX-512, or when
//! `d` is not a multiple of 16, the same steps run in plain loops.

use super::attention::{KvHead, Mask};
use super::exp::{col_exp_scale, col_max, exp_f32};
use super::x86;
use std::ops::Range;

/// Keys per step of the online softmax: the scores tile is `TILE × rows` floats.
pub const TILE: usize = 32;

/// Query rows are padded to a multiple of this (one AVX-512 vector).
const LANES: usize = 16;

/// Query positions per block for `group` query heads per KV head: about 64 query rows
/// per pass (4 to 16 positions), enough to share each key row without spilling the
/// block's queries and outputs out of L1/L2.
pub fn block_positions(group: usize) -> usize {
    (64 / group.max(1)).clamp(4, 16)
}

/// Where a block's queries and outputs sit: `positions` consecutive positions from
/// `first`, each a row of `stride` floats whose first `heads · d` are the `heads` query
/// heads (adjacent) that share the KV head.
#[derive(Clone, Copy, Debug)]
pub struct QueryBlock {
    pub first: usize,
    pub positions: usize,
    pub heads: usize,
    pub d: usize,
    pub stride: usize,
}

/// Buffers of [`attend_block`], grown to the largest block seen and then reused.
#[derive(Debug, Default)]
pub struct BlockScratch {
    /// Queries transposed, `[d, rows]`.
    qt: Vec<f32>,
    /// Scores, then softmax numerators, of one tile: `[TILE, rows]`.
    st: Vec<f32>,
    /// Unnormalised outputs `[rows, d]`.
    acc: Vec<f32>,
    /// Per query row: running maximum, running sum, the tile's shift and rescale factor.
    max: Vec<f32>,
    sum: Vec<f32>,
    shift: Vec<f32>,
    alpha: Vec<f32>,
}

impl BlockScratch {
    fn prepare(&mut self, d: usize, rows: usize) {
        for (buf, len, fill) in [
            (&mut self.qt, d * rows, 0.0),
            (&mut self.st, TILE * rows, 0.0),
            (&mut self.acc, d * rows, 0.0),
            (&mut self.max, rows, f32::NEG_INFINITY),
            (&mut self.sum, rows, 0.0),
            (&mut self.shift, rows, 0.0),
            (&mut self.alpha, rows, 0.0),
        ] {
            buf.clear();
            buf.resize(len, fill);
        }
    }
}

/// `out = softmax(q·kᵀ·scale)·v` for every query row of `block` (position `first + t`,
/// head `h` at `q[t·stride + h·d ..]`), each over the keys its `mask` span shows (clipped
/// to the rows `kv` holds); `out` has `q`'s layout. Equals [`attend_reference`] per
/// position to rounding (tests pin it).
///
/// [`attend_reference`]: super::attention::attend_reference
pub fn attend_block(
    q: &[f32],
    kv: KvHead,
    block: QueryBlock,
    mask: Mask,
    scale: f32,
    s: &mut BlockScratch,
    out: &mut [f32],
) {
    let QueryBlock {
        first,
        positions: m,
        heads,
        d,
        stride,
    } = block;
    let last_row = (m.max(1) - 1) * stride + heads * d;
    assert!(
        m > 0 && heads > 0 && d > 0 && heads * d <= stride,
        "attend_block: shapes"
    );
    assert!(
        q.len() >= last_row && out.len() >= last_row && kv.offset + d <= kv.stride,
        "attend_block: rows past the buffers"
    );
    let held = match kv
        .keys
        .len()
        .min(kv.values.len())
        .checked_sub(kv.offset + d)
    {
        Some(rest) => rest / kv.stride + 1,
        None => 0,
    };
    let span = |t: usize| {
        let s = mask.span(first + t);
        s.start..s.end.min(held)
    };
    let rows = m * heads;
    let rp = rows.next_multiple_of(LANES);
    s.prepare(d, rp);
    for r in 0..rows {
        let qr = &q[r / heads * stride + r % heads * d..][..d];
        for (c, &x) in qr.iter().enumerate() {
            s.qt[c * rp + r] = x;
        }
    }
    // Spans only move forward with the position: the block needs the union of the first
    // and last, and every row sees the keys of their intersection unmasked.
    let all = span(0).start..span(m - 1).end;
    let shared = span(m - 1).start..span(0).end;
    for k0 in all.clone().step_by(TILE) {
        let keys = k0..(k0 + TILE).min(all.end);
        let st = &mut s.st[..keys.len() * rp];
        scores(&s.qt, kv, keys.clone(), d, scale, st);
        if keys.start < shared.start || keys.end > shared.end {
            for (j, srow) in keys.clone().zip(st.chunks_exact_mut(rp)) {
                for (r, x) in srow[..rows].iter_mut().enumerate() {
                    if !span(r / heads).contains(&j) {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
        }
        online_softmax_step(s, keys.len() * rp);
        values(
            &s.st[..keys.len() * rp],
            &s.alpha,
            kv,
            keys,
            rows,
            &mut s.acc,
        );
    }
    for r in 0..rows {
        let o = &mut out[r / heads * stride + r % heads * d..][..d];
        let a = &s.acc[r * d..][..d];
        // A row with no visible key (only past the keys held) attends to nothing: zeros.
        let inv = if s.sum[r] > 0.0 { 1.0 / s.sum[r] } else { 0.0 };
        for (oc, &ac) in o.iter_mut().zip(a) {
            *oc = ac * inv;
        }
    }
}

/// One tile's step of the online softmax over the scores `st[..len]` (`[keys, rows]`):
/// the new running maximum, the factor `alpha = e^(old max − new max)` that rescales
/// what was summed so far, the numerators `e^(s − new max)` in place of the scores, and
/// the running sum. A row that has seen only masked keys keeps a shift of 0, so
/// `−∞ − shift` stays `−∞` (weight 0) instead of NaN.
fn online_softmax_step(s: &mut BlockScratch, len: usize) {
    let st = &mut s.st[..len];
    s.alpha.copy_from_slice(&s.max);
    col_max(st, &mut s.max);
    for ((shift, alpha), &m) in s.shift.iter_mut().zip(&mut s.alpha).zip(&s.max) {
        *shift = if m == f32::NEG_INFINITY { 0.0 } else { m };
        *alpha = exp_f32(*alpha - *shift);
    }
    col_exp_scale(st, &s.shift, 1.0);
    for (sum, &alpha) in s.sum.iter_mut().zip(&s.alpha) {
        *sum *= alpha;
    }
    for row in st.chunks_exact(s.sum.len()) {
        for (sum, &p) in s.sum.iter_mut().zip(row) {
            *sum += p;
        }
    }
}

/// `st[j, r] = scale · Σ_c k_j[c] · qt[c, r]` for the keys `keys` (`st` is
/// `[keys.len(), rows]`, `qt` `[d, rows]`).
fn scores(qt: &[f32], kv: KvHead, keys: Range<usize>, d: usize, scale: f32, st: &mut [f32]) {
    let rp = qt.len() / d;
    debug_assert!(st.len() == keys.len() * rp && rp.is_multiple_of(LANES));
    // SAFETY: `qt` is `[d, rp]` with rp a multiple of 16, `st` is `[keys, rp]`, and every
    // row of `keys` lies inside `kv.keys` (attend_block clipped the span to the rows held).
    if unsafe { x86::block_scores(qt, d, kv, keys.clone(), scale, st) } {
        return;
    }
    for (j, srow) in keys.zip(st.chunks_exact_mut(rp)) {
        srow.fill(0.0);
        let k = &kv.keys[j * kv.stride + kv.offset..][..d];
        for (&kc, qrow) in k.iter().zip(qt.chunks_exact(rp)) {
            for (x, &qv) in srow.iter_mut().zip(qrow) {
                *x += kc * qv;
            }
        }
        srow.iter_mut().for_each(|x| *x *= scale);
    }
}

/// `acc[r] = alpha[r] · acc[r] + Σ_j p[j, r] · v_j` for the first `rows` query rows
/// (`p` is `[keys, alpha.len()]`, `acc` `[.., d]`).
fn values(p: &[f32], alpha: &[f32], kv: KvHead, keys: Range<usize>, rows: usize, acc: &mut [f32]) {
    let d = acc.len() / alpha.len();
    // SAFETY: the shapes are those of the doc above, and every row of `keys` lies inside
    // `kv.values` (attend_block clipped the span to the rows held).
    if unsafe { x86::block_values(p, alpha, kv, keys.clone(), rows, acc) } {
        return;
    }
    let rp = alpha.len();
    for (r, a) in acc.chunks_exact_mut(d).take(rows).enumerate() {
        a.iter_mut().for_each(|x| *x *= alpha[r]);
        for (jj, j) in keys.clone().enumerate() {
            let pj = p[jj * rp + r];
            let v = &kv.values[j * kv.stride + kv.offset..][..d];
            for (x, &vc) in a.iter_mut().zip(v) {
                *x += pj * vc;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::attention::attend_reference;
    use super::super::policy::with_switches;
    use super::*;
    use crate::rand::random_tokens;

    /// How far `attend_block` may be from [`attend_reference`] in output column `c` of one
    /// head: `bound · B_c`, with `B_c = Σ_j p_j·|v_jc|` (ε = `f32::EPSILON`, n visible
    /// keys, T tiles of them, R = max(s) − min(s) over the scores):
    /// - each score is a sum of d products in another order: it moves by
    ///   δ ≤ (d+1)·ε·scale·Σ|q·k|, which moves each weight by ≤ 2δ relative;
    /// - the reference's softmax rounds by (R + n + 3)·ε/2 relative (the exponent's
    ///   rounding amplified by exp), the online one by as much again plus, per tile, the
    ///   rescale `e^(old − new max)` (argument rounded by |old − new|·ε, which telescopes to
    ///   ≤ R over the tiles, and 2 ulp of `exp_f32`) and one product each in the sum and the
    ///   output: ≤ (R + 4T)·ε more;
    /// - `exp_f32` is within 2 ulp of the correctly rounded exp (the reference's libm):
    ///   4ε on the ratio of numerator and sum;
    /// - each side's weighted sum of values is within (n+1)·ε·B_c of the exact one.
    fn bound(qh: &[f32], keys: &[f32], stride: usize, span: Range<usize>, scale: f32) -> f32 {
        let (d, eps, n) = (qh.len(), f32::EPSILON, span.len() as f32);
        let tiles = span.len().div_ceil(TILE) as f32 + 1.0;
        let row = |j: usize| &keys[j * stride..][..d];
        let s: Vec<f32> = span
            .clone()
            .map(|j| super::super::dot(qh, row(j)) * scale)
            .collect();
        let (hi, lo) = s
            .iter()
            .fold((f32::MIN, f32::MAX), |(h, l), &x| (h.max(x), l.min(x)));
        let delta = span
            .map(|j| {
                let a: f32 = qh.iter().zip(row(j)).map(|(x, y)| (x * y).abs()).sum();
                (d as f32 + 1.0) * eps * scale * a
            })
            .fold(0.0f32, f32::max);
        2.0 * delta + eps * (2.0 * (hi - lo) + 4.0 * tiles + 3.0 * n + 14.0)
    }

    /// `B_c = Σ_j p_j·|v_jc|` with the reference's weights (its output on |v|).
    fn weighted_abs(q: &[f32], kv: KvHead, span: Range<usize>, scale: f32, d: usize) -> Vec<f32> {
        let abs: Vec<f32> = kv.values.iter().map(|v| v.abs()).collect();
        let kv_abs = KvHead { values: &abs, ..kv };
        let mut b = vec![0.0; q.len()];
        attend_reference(q, d, kv_abs, span, scale, &mut Vec::new(), &mut b);
        b
    }

    /// Every block size (dividing the positions or not) and first position, head dims the
    /// AVX-512 kernels take (64, 128), one only the AVX2 values take (40) and one neither
    /// does (20), groups of 1, 3 and 4 query heads, causal, unmasked and sliding windows
    /// (spans that start past 0, including windows shorter than a block and than a tile):
    /// each query row of the block equals [`attend_reference`] at its position within
    /// [`bound`], on the widest path the CPU has, without AVX-512 (AVX2) and on the
    /// portable loops.
    #[test]
    fn block_attention_equals_reference() {
        let n = 75;
        let mut checked = 0;
        for (d, group, kv_heads) in [(64, 3, 3), (128, 4, 2), (40, 1, 2), (64, 1, 1), (20, 2, 1)] {
            let qd = group * kv_heads * d;
            let seed = 300 + (d * group) as u64;
            let q = random_tokens(n, qd, seed);
            let k = random_tokens(n, kv_heads * d, seed + 1);
            let v = random_tokens(n, kv_heads * d, seed + 2);
            let (q, keys, values) = (
                q.as_slice().unwrap(),
                k.as_slice().unwrap(),
                v.as_slice().unwrap(),
            );
            let scale = (d as f32).powf(-0.5);
            let masks = [
                Mask::Causal,
                Mask::None,
                Mask::SlidingWindow(3),
                Mask::SlidingWindow(40),
            ];
            for (path, mask, m) in ["widest", "avx2", "portable"]
                .into_iter()
                .flat_map(|p| masks.map(|mask| (p, mask)))
                .flat_map(|(p, mask)| [16, 7, 5].map(|m| (p, mask, m)))
            {
                let mut got = vec![f32::NAN; n * qd];
                let mut s = BlockScratch::default();
                with_switches(
                    |sw| {
                        sw.no_avx512 = path != "widest";
                        sw.portable_matmul = path == "portable";
                    },
                    || {
                        for first in (0..n).step_by(m) {
                            let positions = m.min(n - first);
                            for g in 0..kv_heads {
                                let kv = KvHead {
                                    keys,
                                    values,
                                    stride: kv_heads * d,
                                    offset: g * d,
                                };
                                let block = QueryBlock {
                                    first,
                                    positions,
                                    heads: group,
                                    d,
                                    stride: qd,
                                };
                                let at = first * qd + g * group * d;
                                let out = &mut got[at..];
                                attend_block(&q[at..], kv, block, mask, scale, &mut s, out);
                            }
                        }
                    },
                );
                for pos in 0..n {
                    let span = mask.span(pos);
                    let span = span.start..span.end.min(n);
                    for g in 0..kv_heads {
                        let kv = KvHead {
                            keys,
                            values,
                            stride: kv_heads * d,
                            offset: g * d,
                        };
                        let at = pos * qd + g * group * d..pos * qd + (g + 1) * group * d;
                        let qg = &q[at.clone()];
                        let mut want = vec![0.0; group * d];
                        let scores = &mut Vec::new();
                        attend_reference(qg, d, kv, span.clone(), scale, scores, &mut want);
                        let b = weighted_abs(qg, kv, span.clone(), scale, d);
                        for (h, qh) in qg.chunks_exact(d).enumerate() {
                            let tol = bound(qh, &keys[g * d..], kv.stride, span.clone(), scale);
                            for c in h * d..(h + 1) * d {
                                let (x, y) = (got[at.start + c], want[c]);
                                assert!(
                                    (x - y).abs() <= tol * b[c],
                                    "d {d} group {group} {mask:?} block {m} {path} \
                                     pos {pos} head {h} col {c}: {x} vs {y} \
                                     (bound {})",
                                    tol * b[c]
                                );
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 1_000_000, "{checked} outputs checked");
    }

    /// Padding rows, a block past the keys held and a span clipped to them: rows that
    /// see no key get zeros, never NaN.
    #[test]
    fn rows_without_keys_are_zero() {
        let d = 16;
        let keys: Vec<f32> = (0..4 * d).map(|i| (i % 7) as f32 / 7.0).collect();
        let kv = KvHead {
            keys: &keys,
            values: &keys,
            stride: d,
            offset: 0,
        };
        let q = vec![0.5; 3 * d];
        let mut out = vec![f32::NAN; 3 * d];
        let block = QueryBlock {
            first: 6,
            positions: 3,
            heads: 1,
            d,
            stride: d,
        };
        let mask = Mask::SlidingWindow(2);
        attend_block(
            &q,
            kv,
            block,
            mask,
            0.25,
            &mut BlockScratch::default(),
            &mut out,
        );
        assert!(out.iter().all(|&x| x == 0.0), "{out:?}");
    }
}
