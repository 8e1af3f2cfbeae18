//! Register tiles of the int8 kernels (chapter 10): up to [`MAX_ROWS`] weight rows in a
//! block format against up to [`MAX_TILE_TOKENS`] quantised token rows in one pass, for
//! the three types of llama.cpp's q8_0 and q4_k_m files (Q8_0, Q4_K, Q6_K). Each
//! activation block's token vector is loaded once for all rows and each weight block is
//! unpacked once for all tokens; the sums stay in f32 vector registers (one per row and
//! token) until the end of the row, where one horizontal sum gives each dot. The integer
//! sum of each activation block is the reference's exactly; only the f32 additions come
//! in another order, so tests pin every tile to
//! [`super::dot_row_reference`] within `4·(blocks)·ε·Σ|terms|`.
//!
//! The K types' minima and offsets use the activations' per-16 sums: Q4_K's
//! `Σ_s dmin·m_s·dx_s·Σx̂q` is one 8-lane product per 256 weights with
//! [`super::ActRow::dsums`], Q6_K's `32·d·Σ_s sc_s·Σx̂q` one `vpmaddwd`.

use super::ActRow;
use crate::quant::GgmlType;

/// Weight rows per tile.
pub const MAX_ROWS: usize = 4;
/// Token rows per tile.
pub const MAX_TILE_TOKENS: usize = 2;

/// Whether `ty` has register tiles on this CPU.
pub fn has_tiles(ty: GgmlType) -> bool {
    crate::kernels::dispatch::kernels(ty).avx2_int8_tiles && avx2::available()
}

/// `out[i · xs.len() + t] = Σ_c w_i,c · x̂_t,c` for the weight rows `rows` (each whole
/// blocks of type `ty`, at most [`MAX_ROWS`]) and the quantised token rows `xs` (at most
/// [`MAX_TILE_TOKENS`], blocks of 32, as long as the rows). Returns false, having done
/// nothing, when [`has_tiles`] is false.
pub fn dot_tile(ty: GgmlType, rows: &[&[u8]], xs: &[ActRow], out: &mut [f32]) -> bool {
    if !has_tiles(ty) {
        return false;
    }
    assert!(
        (1..=MAX_ROWS).contains(&rows.len()) && (1..=MAX_TILE_TOKENS).contains(&xs.len()),
        "dot_tile: tile shape"
    );
    assert_eq!(out.len(), rows.len() * xs.len(), "dot_tile: output length");
    let n = xs[0].qs.len();
    let block = super::activation_block(ty).expect("a tiled type has a block");
    for x in xs {
        assert!(
            x.qs.len() == n && x.d.len() * block == n && x.sums.len() * 16 == n,
            "dot_tile: activation blocks"
        );
        assert_eq!(x.dsums.len(), x.d.len(), "dot_tile: activation sums");
    }
    for r in rows {
        assert_eq!(
            ty.row_bytes(n as u64),
            Some(r.len() as u64),
            "dot_tile: row length"
        );
    }
    if xs.len() == 1 {
        // Decode: one token has nothing to share between rows; the row kernels are leaner.
        for (o, r) in out.iter_mut().zip(rows) {
            *o = super::decode::dot_row(ty, r, xs[0]).expect("decode kernels: has_tiles");
        }
        return true;
    }
    match rows.len() {
        1 => tile::<1, 2>(ty, rows, xs, out),
        2 => tile::<2, 2>(ty, rows, xs, out),
        3 => tile::<3, 2>(ty, rows, xs, out),
        _ => tile::<4, 2>(ty, rows, xs, out),
    }
    true
}

/// One monomorphised tile: copies the row and token slices into arrays, runs the kernel.
fn tile<const R: usize, const T: usize>(
    ty: GgmlType,
    rows: &[&[u8]],
    xs: &[ActRow],
    out: &mut [f32],
) {
    let rows: [&[u8]; R] = std::array::from_fn(|i| rows[i]);
    let xs: [ActRow; T] = std::array::from_fn(|t| xs[t]);
    let v = avx2::tile::<R, T>(ty, &rows, &xs);
    for (i, row) in v.iter().enumerate() {
        out[i * T..(i + 1) * T].copy_from_slice(row);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! Bounds of the integer steps, per use: `vpmaddubsw` pairs of an unsigned weight
    //! value q ≤ 63 by |x̂| ≤ 127 are at most 2·63·127 = 16002 < 2^15, and Q8_0's sign
    //! trick (|w| ≤ 128 by x̂ with w's sign) at most 2·128·127 = 32512; `vpmaddwd` by a
    //! scale ≤ 128 stays below 2^23 per lane.
    use super::ActRow;
    use crate::kernels::x86::hsum8;
    use crate::quant::GgmlType;
    use std::arch::x86_64::*;

    /// AVX2, FMA and F16C, which every kernel here is compiled with.
    pub fn available() -> bool {
        crate::kernels::policy::cpu().avx2_fma()
    }

    /// The tile for `ty` (one of Q8_0, Q4_K, Q6_K; shapes checked by `dot_tile`).
    pub fn tile<const R: usize, const T: usize>(
        ty: GgmlType,
        rows: &[&[u8]; R],
        xs: &[ActRow; T],
    ) -> [[f32; T]; R] {
        assert!(available(), "quant tiles: AVX2/FMA/F16C");
        // SAFETY: the CPU features were checked just above; each kernel reads its rows and
        // activations through bounds-checked slices before every load (`load32`, `loadf8`).
        unsafe {
            match ty {
                GgmlType::Q8_0 => q8_0(rows, xs),
                GgmlType::Q4_K => q4_k(rows, xs),
                GgmlType::Q6_K => q6_k(rows, xs),
                _ => panic!("quant tiles: no tile for {}", ty.name()),
            }
        }
    }

    /// 32 bytes at `s[..32]` (bounds-checked, then an unaligned load).
    #[inline(always)]
    fn load32<T>(s: &[T]) -> __m256i {
        assert!(std::mem::size_of_val(s) >= 32, "load32: short slice");
        // SAFETY: the slice holds at least 32 bytes (asserted); the load is unaligned,
        // and AVX is implied by the callers' target features.
        unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) }
    }

    /// Eight f32 at `s[..8]`.
    #[inline(always)]
    fn loadf8(s: &[f32]) -> __m256 {
        assert!(s.len() >= 8, "loadf8: short slice");
        // SAFETY: eight floats are there (asserted); the load is unaligned.
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    }

    /// The little-endian f16 at `b[0..2]`, widened with F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn f16_at(b: &[u8]) -> f32 {
        let bits = u16::from_le_bytes([b[0], b[1]]);
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn finish<const R: usize, const T: usize>(acc: &[[__m256; T]; R]) -> [[f32; T]; R] {
        let mut out = [[0.0f32; T]; R];
        for (o, a) in out.iter_mut().zip(acc) {
            for (v, x) in o.iter_mut().zip(a) {
                *v = hsum8(*x);
            }
        }
        out
    }

    /// Q8_0: per block `Σ_h (dw·dx_h)·Σ w·x̂` over its two 16-value activation blocks
    /// `h` (lanes 0..4 and 4..8 of `vpmaddwd`), the sum by `vpmaddubsw` of |w| and x̂ carrying
    /// w's sign (x̂ ≠ −128: the quantiser clamps to ±127).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn q8_0<const R: usize, const T: usize>(rows: &[&[u8]; R], xs: &[ActRow; T]) -> [[f32; T]; R] {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        for b in 0..xs[0].d.len() / 2 {
            let x: [__m256i; T] = std::array::from_fn(|t| load32(&xs[t].qs[32 * b..]));
            // The two 16-value activation blocks' steps, in the lanes of their products.
            let dx: [__m256; T] = std::array::from_fn(|t| {
                let (d0, d1) = (xs[t].d[2 * b], xs[t].d[2 * b + 1]);
                _mm256_set_m128(_mm_set1_ps(d1), _mm_set1_ps(d0))
            });
            for (a, row) in acc.iter_mut().zip(rows) {
                let blk = &row[34 * b..34 * b + 34];
                let dw = f16_at(blk);
                let w = load32(&blk[2..]);
                let aw = _mm256_sign_epi8(w, w);
                for t in 0..T {
                    let p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x[t], w));
                    let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                    let scale = _mm256_mul_ps(_mm256_set1_ps(dw), dx[t]);
                    a[t] = _mm256_fmadd_ps(s, scale, a[t]);
                }
            }
        }
        finish(&acc)
    }

    /// Q4_K: per 32-weight sub-block `s` (activation block `j`), `d·dx_j·sc_s·Σ q·x̂q`,
    /// summed per 256-weight block before the one multiplication by `d`; minus
    /// `dmin·Σ_s m_s·dx_j·Σx̂q`, one 8-lane product with the token's `dsums`.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn q4_k<const R: usize, const T: usize>(rows: &[&[u8]; R], xs: &[ActRow; T]) -> [[f32; T]; R] {
        let m4 = _mm256_set1_epi8(0x0f);
        // Byte shuffles repeating i16 lane s (bytes 2s, 2s + 1) across a register.
        let pick: [__m256i; 8] =
            std::array::from_fn(|s| _mm256_set1_epi16((2 * s as i16) | ((2 * s as i16 + 1) << 8)));
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        for b in 0..xs[0].d.len() / 8 {
            // Per row: the 8 scales as i16 in both 128-bit lanes (one byte shuffle picks
            // a sub-block's), the 8 minima as f32 times dmin.
            let mut sc = [_mm256_setzero_si256(); R];
            let mut d = [0.0f32; R];
            for i in 0..R {
                let blk = &rows[i][144 * b..144 * b + 144];
                d[i] = f16_at(blk);
                let dmin = f16_at(&blk[2..]);
                let (scales, mins) = super::super::unpack_scale_min_k4(&blk[4..16]);
                let s16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(scales as i64));
                sc[i] = _mm256_broadcastsi128_si256(s16);
                let m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mins as i64)));
                let mins = _mm256_mul_ps(m, _mm256_set1_ps(dmin));
                for t in 0..T {
                    let ds = loadf8(&xs[t].dsums[8 * b..]);
                    acc[i][t] = _mm256_fnmadd_ps(mins, ds, acc[i][t]);
                }
            }
            let mut blockacc = [[_mm256_setzero_ps(); T]; R];
            for (s, pick) in pick.iter().enumerate() {
                let j = 8 * b + s;
                let x: [__m256i; T] = std::array::from_fn(|t| load32(&xs[t].qs[32 * j..]));
                let dx: [__m256; T] = std::array::from_fn(|t| _mm256_set1_ps(xs[t].d[j]));
                for i in 0..R {
                    let q = load32(&rows[i][144 * b + 16 + 32 * (s / 2)..]);
                    let q = if s % 2 == 0 {
                        _mm256_and_si256(q, m4)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)
                    };
                    let scale = _mm256_shuffle_epi8(sc[i], *pick);
                    for t in 0..T {
                        let p = _mm256_maddubs_epi16(q, x[t]);
                        let v = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, scale));
                        blockacc[i][t] = _mm256_fmadd_ps(v, dx[t], blockacc[i][t]);
                    }
                }
            }
            for i in 0..R {
                let dv = _mm256_set1_ps(d[i]);
                for t in 0..T {
                    acc[i][t] = _mm256_fmadd_ps(blockacc[i][t], dv, acc[i][t]);
                }
            }
        }
        finish(&acc)
    }

    /// Q6_K: per activation block `j` (16-weight sub-blocks `2j`, `2j + 1`),
    /// `d·dx_j·(Σ_s sc_s·Σ q·x̂q − 32·Σ_s sc_s·Σx̂q)`; the second sum for the 8 blocks of
    /// 256 weights at once, `vpmaddwd` of the 16 scales by the 16 per-16 sums.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn q6_k<const R: usize, const T: usize>(rows: &[&[u8]; R], xs: &[ActRow; T]) -> [[f32; T]; R] {
        let pair = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        for b in 0..xs[0].d.len() / 8 {
            let blk: [&[u8]; R] = std::array::from_fn(|i| &rows[i][210 * b..210 * b + 210]);
            let d: [f32; R] = std::array::from_fn(|i| f16_at(&blk[i][208..]));
            let dx: [__m256; T] = std::array::from_fn(|t| loadf8(&xs[t].d[8 * b..]));
            let mut blockacc = [[_mm256_setzero_ps(); T]; R];
            for i in 0..R {
                let s16 = &blk[i][192..208];
                // SAFETY: `s16` is 16 bytes (sliced above); the load is unaligned.
                let raw = unsafe { _mm_loadu_si128(s16.as_ptr() as *const __m128i) };
                let scales = _mm256_cvtepi8_epi16(raw);
                for t in 0..T {
                    // Lane j: sc_2j·Σx̂q(2j) + sc_2j+1·Σx̂q(2j+1), at most 2·128·2032.
                    let sums = load32(&xs[t].sums[16 * b..]);
                    let off = _mm256_cvtepi32_ps(_mm256_madd_epi16(scales, sums));
                    let off = _mm256_mul_ps(off, dx[t]);
                    blockacc[i][t] = _mm256_fnmadd_ps(off, _mm256_set1_ps(32.0), blockacc[i][t]);
                }
            }
            let raw: [__m128i; R] = std::array::from_fn(|i| {
                let s16 = &blk[i][192..208];
                // SAFETY: `s16` is 16 bytes (sliced above); the load is unaligned.
                unsafe { _mm_loadu_si128(s16.as_ptr() as *const __m128i) }
            });
            for h in 0..2 {
                // The 4 activation blocks j8 = 4h + k of this half and their steps.
                let x: [[__m256i; T]; 4] = std::array::from_fn(|k| {
                    std::array::from_fn(|t| load32(&xs[t].qs[32 * (8 * b + 4 * h + k)..]))
                });
                let dxj: [[f32; T]; 4] =
                    std::array::from_fn(|k| std::array::from_fn(|t| xs[t].d[8 * b + 4 * h + k]));
                for i in 0..R {
                    let l0 = load32(&blk[i][64 * h..]);
                    let l1 = load32(&blk[i][64 * h + 32..]);
                    let hb = load32(&blk[i][128 + 32 * h..]);
                    // SAFETY: AVX2, which this function is compiled with (or inlined into).
                    let q = unsafe { super::super::avx2::q6_k_runs(l0, l1, hb) };
                    for k in 0..4 {
                        let j8 = 4 * h + k;
                        // [sc_2j8 × 8, sc_2j8+1 × 8] as i16: one byte shuffle of the
                        // 16 scales, then widened.
                        let pick = _mm_add_epi8(pair, _mm_set1_epi8(2 * j8 as i8));
                        let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(raw[i], pick));
                        for t in 0..T {
                            let p = _mm256_maddubs_epi16(q[k], x[k][t]);
                            let v = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, sc));
                            let dx = _mm256_set1_ps(dxj[k][t]);
                            blockacc[i][t] = _mm256_fmadd_ps(v, dx, blockacc[i][t]);
                        }
                    }
                }
            }
            for i in 0..R {
                let dv = _mm256_set1_ps(d[i]);
                for t in 0..T {
                    acc[i][t] = _mm256_fmadd_ps(blockacc[i][t], dv, acc[i][t]);
                }
            }
        }
        finish(&acc)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx2 {
    use super::ActRow;
    use crate::quant::GgmlType;
    /// No AVX2 here: the per-row kernels run.
    pub fn available() -> bool {
        false
    }
    pub fn tile<const R: usize, const T: usize>(
        _: GgmlType,
        _: &[&[u8]; R],
        _: &[ActRow; T],
    ) -> [[f32; T]; R] {
        unreachable!("quant tiles: not on this CPU")
    }
}

#[cfg(test)]
mod tests {
    use super::super::{QuantizedRows, activation_block, dot_row_reference};
    use super::*;
    use crate::quant::{dequantize, quantize};

    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(99);
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let u = s as f32 / u32::MAX as f32 - 0.5;
                if i % 89 == 7 {
                    9.0 * u * scale
                } else {
                    u * scale
                }
            })
            .collect()
    }

    /// Every tile shape of every type equals the reference row dots within the f32
    /// re-association bound (the integer block sums are the same).
    #[test]
    fn tiles_equal_the_reference_dots() {
        if !avx2::available() {
            return;
        }
        for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K] {
            assert!(has_tiles(ty));
            let cols = 1024;
            let w = values(MAX_ROWS * cols, 3, 0.3);
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let rb = bytes.len() / MAX_ROWS;
            let xs = values(MAX_TILE_TOKENS * cols, 11, 2.0);
            let mut acts = QuantizedRows::default();
            acts.quantize(&xs, cols, activation_block(ty).unwrap());
            let mut wd = vec![0.0f32; w.len()];
            dequantize(ty, &bytes, &mut wd);
            for nr in 1..=MAX_ROWS {
                for nt in 1..=MAX_TILE_TOKENS {
                    let rows: Vec<&[u8]> = (0..nr).map(|i| &bytes[i * rb..][..rb]).collect();
                    let ts: Vec<ActRow> = (0..nt).map(|t| acts.row(t)).collect();
                    let mut out = vec![0.0f32; nr * nt];
                    assert!(dot_tile(ty, &rows, &ts, &mut out));
                    for i in 0..nr {
                        for t in 0..nt {
                            let want = dot_row_reference(ty, rows[i], ts[t]);
                            let xd = acts.dequantize_row(t);
                            let mag: f32 = wd[i * cols..(i + 1) * cols]
                                .iter()
                                .zip(&xd)
                                .map(|(a, b)| (a * b).abs())
                                .sum();
                            let got = out[i * nt + t];
                            let tol = 4.0 * (cols / 32) as f32 * f32::EPSILON * mag;
                            assert!(
                                (got - want).abs() <= tol,
                                "{} {nr}x{nt} [{i},{t}]: {got} vs {want} (tol {tol})",
                                ty.name()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_word_unpacking_of_q4_k_scales_is_scale_min_k4() {
        use crate::quant::k_blocks::scale_min_k4;
        let mut seed = 7u32;
        for _ in 0..200 {
            let b: Vec<u8> = (0..12)
                .map(|_| {
                    seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                    (seed >> 24) as u8
                })
                .collect();
            let (sc, m) = super::super::unpack_scale_min_k4(&b);
            for s in 0..8 {
                let (c, mn) = scale_min_k4(s, &b);
                assert_eq!(((sc >> (8 * s)) & 0xff) as u8, c);
                assert_eq!(((m >> (8 * s)) & 0xff) as u8, mn);
            }
        }
    }

    #[test]
    fn a_non_finite_activation_gives_nan() {
        if !avx2::available() {
            return;
        }
        for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K] {
            let w = values(256, 1, 0.3);
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let mut x = values(256, 2, 1.0);
            x[40] = f32::NAN;
            let mut acts = QuantizedRows::default();
            acts.quantize(&x, 256, activation_block(ty).unwrap());
            let mut out = [0.0f32];
            assert!(dot_tile(ty, &[&bytes], &[acts.row(0)], &mut out));
            assert!(out[0].is_nan(), "{}", ty.name());
        }
    }
}

#[cfg(test)]
mod timing {
    use super::super::{QuantizedRows, dot_row};
    use super::*;
    use crate::quant::quantize;

    /// This thread's CPU time, so other processes on the machine do not count.
    fn cpu_seconds() -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant of libc.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime");
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    }

    /// Per-row dots against tiles, single thread, in thread CPU time (`cargo test --release --lib
    /// tile_timing -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn tile_timing() {
        let (rows, cols) = (2048, 2048);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 211) as f32 - 105.0) / 300.0)
            .collect();
        let x: Vec<f32> = (0..2 * cols)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
            .collect();
        let mut acts = QuantizedRows::default();
        for ty in [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K] {
            acts.quantize(&x, cols, super::super::activation_block(ty).unwrap());
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let rb = bytes.len() / rows;
            let t0 = cpu_seconds();
            let mut s = 0.0;
            for _ in 0..5 {
                for r in 0..rows {
                    s += dot_row(ty, &bytes[r * rb..][..rb], acts.row(0));
                }
            }
            let per_row = (cpu_seconds() - t0) / 5.0;
            let t0 = cpu_seconds();
            let mut out = [0.0f32; 4];
            for _ in 0..5 {
                for r in (0..rows).step_by(4) {
                    let rs: Vec<&[u8]> = (0..4).map(|i| &bytes[(r + i) * rb..][..rb]).collect();
                    dot_tile(ty, &rs, &[acts.row(0)], &mut out);
                    s += out[0];
                }
            }
            let tile41 = (cpu_seconds() - t0) / 5.0;
            let t0 = cpu_seconds();
            let mut out = [0.0f32; 8];
            for _ in 0..5 {
                for r in (0..rows).step_by(4) {
                    let rs: Vec<&[u8]> = (0..4).map(|i| &bytes[(r + i) * rb..][..rb]).collect();
                    dot_tile(ty, &rs, &[acts.row(0), acts.row(1)], &mut out);
                    s += out[0];
                }
            }
            let tile42 = (cpu_seconds() - t0) / 5.0 / 2.0;
            let gb = bytes.len() as f64 / 1e9;
            eprintln!(
                "{}: per-row {:.2} GB/s, tile 4x1 {:.2} GB/s, tile 4x2 {:.2} GB/s per token ({s})",
                ty.name(),
                gb / per_row,
                gb / tile41,
                gb / tile42
            );
        }
    }
}

#[cfg(test)]
mod big_timing {
    use super::super::with_quant_activations;
    use crate::kernels::Matrix;
    use crate::quant::{GgmlType, quantize};

    /// This process's CPU time (all threads), so other processes on the machine do not count.
    fn process_cpu_seconds() -> f64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant of libc.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime");
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    }

    /// One token through an LM-head-sized matrix (151,936 × 2048, far beyond the caches),
    /// the decode shape that dominates the 4-layer bench model (`cargo test --release --lib
    /// big_timing -- --ignored --nocapture`; `RAYON_NUM_THREADS` sets the threads).
    #[test]
    #[ignore]
    fn big_timing() {
        let (rows, cols) = (151_936, 2048);
        let w: Vec<f32> = (0..64 * cols)
            .map(|i| ((i * 7919 % 211) as f32 - 105.0) / 300.0)
            .collect();
        let x: Vec<f32> = (0..cols)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
            .collect();
        for ty in [GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::Q8_0] {
            let mut block = Vec::new();
            quantize(ty, &w, &mut block);
            let bytes: Vec<u8> = block
                .iter()
                .copied()
                .cycle()
                .take(block.len() / 64 * rows)
                .collect();
            let m = Matrix::quant(ty, &bytes, rows, cols);
            let mut out = vec![0.0f32; rows];
            with_quant_activations(true, || m.matmul(&x, &mut out));
            let reps = 10;
            let t0 = process_cpu_seconds();
            for _ in 0..reps {
                with_quant_activations(true, || m.matmul(&x, &mut out));
            }
            let s = (process_cpu_seconds() - t0) / reps as f64;
            eprintln!(
                "{}: {:.1} ms CPU per token, {:.2} GB/s per CPU second ({} MB)",
                ty.name(),
                s * 1e3,
                bytes.len() as f64 / s / 1e9,
                bytes.len() / 1_000_000
            );
        }
    }
}
