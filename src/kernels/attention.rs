//! Attention as one concept, at the bottom floor: the [`Mask`] that says which keys a query
//! may see, and `softmax(q·kᵀ·scale)·v` three ways. [`naive_attention`] materialises the
//! score matrix on ndarray (chapters 1 and 3 show it; chapter 3's tiled online-softmax
//! form is pinned to it); [`attend_reference`] is the engine's inner loop for one position
//! over a KV cache, grouped-query (chapter 9); [`attend`] is its fast twin (chapter 10),
//! with the AVX-512 kernel of `x86.rs` when the CPU has one. A test at the end pins all
//! three equal. A prefill serves many positions at once: `attention_block.rs` reads each
//! key row once for a block of them (flash attention's online softmax).

pub use super::KvHead;
use super::{dot, softmax_in_place, x86};
use ndarray::{Array2, ArrayView2};
use std::ops::Range;

/// Which keys a query at position `i` may see (keys and queries share positions
/// `0..n`; for a cache, queries are the last rows).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mask {
    /// Every key (bidirectional).
    None,
    /// Keys at positions `≤ i`.
    Causal,
    /// Keys at positions in `(i − window, i]`: causal, at most `window` of them.
    SlidingWindow(usize),
}

impl Mask {
    /// The key positions a query at `pos` may attend to, as one range: `0..pos + 1` when
    /// causal, its last `window` positions with a sliding window. [`Mask::None`] has no
    /// upper end (`0..usize::MAX`); callers clip it to the keys they hold. The only
    /// definition of the mask: [`Mask::allows`] and the engine's window both read it.
    pub fn span(&self, pos: usize) -> Range<usize> {
        match *self {
            Mask::None => 0..usize::MAX,
            Mask::Causal => 0..pos + 1,
            Mask::SlidingWindow(w) => (pos + 1).saturating_sub(w)..pos + 1,
        }
    }

    /// True when the query at `qi` may attend to the key at `kj`.
    pub fn allows(self, qi: usize, kj: usize) -> bool {
        self.span(qi).contains(&kj)
    }
}

// ANCHOR: naive
/// `softmax(q·kᵀ·scale + mask)·v`, materialising the `[n_q, n_k]` score matrix.
/// Query `i` sits at position `n_k − n_q + i`, so a single new query attends to the
/// whole cache.
pub fn naive_attention(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    scale: f32,
    mask: Mask,
) -> Array2<f32> {
    let (n_q, n_k) = (q.nrows(), k.nrows());
    let offset = n_k - n_q;
    let mut scores = Array2::<f32>::zeros((n_q, n_k));
    for i in 0..n_q {
        let qi = q.row(i);
        let qs = qi.as_slice().expect("contiguous q");
        for j in 0..n_k {
            scores[[i, j]] = if mask.allows(offset + i, j) {
                dot(qs, k.row(j).as_slice().expect("contiguous k")) * scale
            } else {
                f32::NEG_INFINITY
            };
        }
        softmax_in_place(scores.row_mut(i).as_slice_mut().expect("contiguous"));
    }
    scores.dot(&v)
}
// ANCHOR_END: naive

// ANCHOR: attend
/// `out_h = Σ_j softmax_j(q_h · k_j · scale) · v_j` over the positions `span`, for the
/// query heads `q` (`[heads, d]`) that share the KV head `kv` (grouped-query attention);
/// `out` is `[heads, d]` and `scores` scratch. The clear version; [`attend`] is the fast
/// one, and a test pins the two equal.
pub fn attend_reference(
    q: &[f32],
    d: usize,
    kv: KvHead,
    span: Range<usize>,
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
/// 16 (with AVX2 FMAs when it has those and `d` is a multiple of 8): each key row is read
/// once for all the heads of the group, the scores of all heads are kept (`scores` is
/// `[heads, span]`), and each head's weighted values are summed 128 (AVX2: 64) columns at
/// a time in registers. Otherwise the reference runs.
pub fn attend(
    q: &[f32],
    d: usize,
    kv: KvHead,
    span: Range<usize>,
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
    // SAFETY: the asserts above are `x86::attend`'s contract: the shapes fit, and every
    // row of `span` (the last one ends at `last`) lies inside `keys` and `values`.
    if unsafe { x86::attend(q, d, kv, span.clone(), scale, scores, out) } {
        return;
    }
    attend_reference(q, d, kv, span, scale, scores, out);
}

/// The softmax weight the query head `qh` puts on the key at position `key` when it
/// attends over `span` (0 when `span` does not hold it): the `p_key` of
/// [`attend_reference`], for tracing where a head looks (the attention sink).
pub fn key_weight(qh: &[f32], kv: KvHead, span: Range<usize>, scale: f32, key: usize) -> f32 {
    if !span.contains(&key) {
        return 0.0;
    }
    let d = qh.len();
    let score = |j: usize| dot(qh, &kv.keys[j * kv.stride + kv.offset..][..d]) * scale;
    let max = span.clone().map(score).fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = span.map(|j| (score(j) - max).exp()).sum();
    (score(key) - max).exp() / sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rand::random_tokens;
    use ndarray::s;

    #[test]
    fn sliding_window_of_full_length_is_causal() {
        for i in 0..6 {
            for j in 0..6 {
                assert_eq!(
                    Mask::SlidingWindow(6).allows(i, j),
                    Mask::Causal.allows(i, j)
                );
            }
        }
        assert!(!Mask::SlidingWindow(2).allows(5, 3));
        assert!(Mask::SlidingWindow(2).allows(5, 4));
    }

    #[test]
    fn span_is_the_visible_keys() {
        assert_eq!(Mask::Causal.span(5), 0..6);
        assert_eq!(Mask::SlidingWindow(2).span(5), 4..6);
        assert_eq!(Mask::SlidingWindow(9).span(5), 0..6);
        assert_eq!(Mask::SlidingWindow(1).span(0), 0..1);
        assert!(Mask::None.span(5).contains(&1_000_000));
    }

    /// The fast attention equals the reference for grouped heads, a sliding span and head
    /// dimensions the AVX-512 path takes (128, 32), one only the AVX2 path takes (24) and
    /// one neither does (20).
    #[test]
    fn attend_equals_reference() {
        let val = |s: usize| ((s * 7919 % 1009) as f32 - 504.0) / 300.0;
        for (d, heads, kv_heads) in [(128, 4, 2), (24, 2, 3), (32, 1, 1), (20, 2, 1)] {
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

    /// How far two f32 evaluations of one head's attention output may differ, per output
    /// column, from the reference's own probabilities `p_j` (ε = `f32::EPSILON`, n the
    /// number of visible keys, B_c = Σ_j p_j·|v_jc|).
    struct Bounds {
        /// Same probabilities, different order of Σ_j p_j·v_jc: each order is within
        /// γ_n·B_c of the exact sum (Higham's bound, products' rounding included), so two
        /// are within 2γ_n·B_c < (n+1)·ε·B_c.
        order: Vec<f32>,
        /// Scores summed in another order as well (the AVX-512 kernel): each score moves
        /// by δ ≤ (d+1)·ε·scale·Σ|q·k|, which moves the softmax by ≤ 2δ·p_j; each side's
        /// softmax rounds by (R + n + 3)·ε/2 relative (R = max(s) − min(s), the exponent's
        /// rounding amplified by exp), and its weighted sum as above.
        fast: Vec<f32>,
    }

    impl Bounds {
        fn new(qh: &[f32], kv: KvHead, span: Range<usize>, scale: f32) -> Bounds {
            let (d, eps, n) = (qh.len(), f32::EPSILON, span.len() as f32);
            let at = |j: usize| j * kv.stride + kv.offset..j * kv.stride + kv.offset + d;
            let mut p: Vec<f32> = span
                .clone()
                .map(|j| dot(qh, &kv.keys[at(j)]) * scale)
                .collect();
            let (hi, lo) = p
                .iter()
                .fold((f32::MIN, f32::MAX), |(h, l), &s| (h.max(s), l.min(s)));
            let delta = span
                .clone()
                .map(|j| {
                    let a: f32 = qh
                        .iter()
                        .zip(&kv.keys[at(j)])
                        .map(|(x, y)| (x * y).abs())
                        .sum();
                    (d as f32 + 1.0) * eps * scale * a
                })
                .fold(0.0f32, f32::max);
            softmax_in_place(&mut p);
            let mut b = vec![0.0f32; d];
            for (j, pj) in span.zip(&p) {
                for (bc, v) in b.iter_mut().zip(&kv.values[at(j)]) {
                    *bc += pj * v.abs();
                }
            }
            let fast = 2.0 * delta + eps * ((hi - lo) + 2.0 * n + 6.0);
            Bounds {
                order: b.iter().map(|bc| (n + 1.0) * eps * bc).collect(),
                fast: b.iter().map(|bc| fast * bc).collect(),
            }
        }
    }

    /// The three attentions agree on seeded normal data, for head dims the AVX-512 path
    /// takes (128, 32, 16) and one it does not (24), grouped (2 or 3 query heads per KV
    /// head) and not, every mask (causal, no mask, windows of 1, 5 and past the sequence).
    /// naive vs reference: the scores are the same `dot`, the softmax the same function
    /// (masked keys add exact zeros to its sum), so only ndarray's order of Σ p·v differs.
    /// fast vs reference: bit-identical where the reference runs (no AVX-512, or d = 24);
    /// within the bound of [`Bounds::fast`] where the AVX-512 kernel does.
    #[test]
    fn naive_reference_and_fast_attention_agree() {
        let positions = 29;
        for (d, heads, kv_heads) in [(128, 4, 2), (24, 6, 3), (32, 2, 1), (16, 3, 3)] {
            let group = heads / kv_heads;
            let seed = 100 + d as u64;
            let q = random_tokens(positions, heads * d, seed);
            let k = random_tokens(positions, kv_heads * d, seed + 1);
            let v = random_tokens(positions, kv_heads * d, seed + 2);
            let (keys, values) = (k.as_slice().unwrap(), v.as_slice().unwrap());
            let scale = (d as f32).powf(-0.5);
            let head = |a: &Array2<f32>, h: usize| a.slice(s![.., h * d..(h + 1) * d]).to_owned();
            let fast_path = (d.is_multiple_of(16) && super::super::use_avx512())
                || (d.is_multiple_of(8) && crate::kernels::policy::cpu().avx2_fma());
            for mask in [
                Mask::Causal,
                Mask::None,
                Mask::SlidingWindow(1),
                Mask::SlidingWindow(5),
                Mask::SlidingWindow(positions + 3),
            ] {
                for g in 0..kv_heads {
                    let (kg, vg) = (head(&k, g), head(&v, g));
                    let naive: Vec<Array2<f32>> = (0..group)
                        .map(|i| {
                            let qh = head(&q, g * group + i);
                            naive_attention(qh.view(), kg.view(), vg.view(), scale, mask)
                        })
                        .collect();
                    let kv = KvHead {
                        keys,
                        values,
                        stride: kv_heads * d,
                        offset: g * d,
                    };
                    for pos in 0..positions {
                        let span = mask.span(pos);
                        let span = span.start..span.end.min(positions);
                        let qg = &q.row(pos).to_slice().unwrap()[g * group * d..][..group * d];
                        let (mut reference, mut fast) =
                            (vec![0.0; group * d], vec![0.0; group * d]);
                        attend_reference(
                            qg,
                            d,
                            kv,
                            span.clone(),
                            scale,
                            &mut Vec::new(),
                            &mut reference,
                        );
                        attend(qg, d, kv, span.clone(), scale, &mut Vec::new(), &mut fast);
                        for (i, qh) in qg.chunks_exact(d).enumerate() {
                            let bound = Bounds::new(qh, kv, span.clone(), scale);
                            for c in 0..d {
                                let (nv, r, f) =
                                    (naive[i][[pos, c]], reference[i * d + c], fast[i * d + c]);
                                let at = format!(
                                    "d {d} {mask:?} head {} pos {pos} col {c}",
                                    g * group + i
                                );
                                assert!(
                                    (nv - r).abs() <= bound.order[c],
                                    "{at}: naive {nv} vs reference {r}"
                                );
                                if fast_path {
                                    assert!(
                                        (f - r).abs() <= bound.fast[c],
                                        "{at}: fast {f} vs reference {r}"
                                    );
                                } else {
                                    assert_eq!(
                                        f.to_bits(),
                                        r.to_bits(),
                                        "{at}: fast {f} vs reference {r}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// [`key_weight`] is the weight [`attend_reference`] gives the key: with values that
    /// are 1 at that key and 0 elsewhere, the attention output is exactly that weight.
    #[test]
    fn key_weight_is_the_softmax_weight_attention_uses() {
        let (d, positions) = (16, 23);
        let keys: Vec<f32> = (0..positions * d)
            .map(|s| ((s * 7919 % 1009) as f32 - 504.0) / 100.0)
            .collect();
        let q: Vec<f32> = (0..d).map(|s| (s as f32 - 7.0) / 5.0).collect();
        for key in [0, 5, 22] {
            let values: Vec<f32> = (0..positions * d)
                .map(|s| f32::from(s / d == key && s % d == 0))
                .collect();
            let kv = KvHead {
                keys: &keys,
                values: &values,
                stride: d,
                offset: 0,
            };
            for span in [0..positions, 3..positions, 0..key + 1] {
                let mut out = vec![0.0; d];
                attend_reference(&q, d, kv, span.clone(), 0.25, &mut Vec::new(), &mut out);
                let w = key_weight(&q, kv, span.clone(), 0.25, key);
                assert!(
                    (w - out[0]).abs() <= 4.0 * f32::EPSILON,
                    "{span:?} key {key}: {w} vs {}",
                    out[0]
                );
            }
        }
    }
}
