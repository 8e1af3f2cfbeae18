//! Chapter 12's products (the kernels of chapter 10): a single-threaded f32 GEMM
//! `C (+)= A·B` with `A` read through strides, so one kernel serves the training step's
//! three shapes of the LM head without transposing anything — `Zᵀ = W·Xᵀ` (logits),
//! `dW += dZᵀ·X` and `dXᵀ += Wᵀ·dZᵀ` (`Wᵀ` is `W` read with its strides swapped).
//!
//! [`gemm_reference`] is the definition (plain loops); [`gemm`] computes the same sums with
//! AVX2+FMA register tiles of 6 rows × 16 columns when the CPU has them (12 accumulators:
//! per step of `k`, two vector loads of `B`, six broadcasts of `A`, twelve FMAs), and falls
//! back to the reference elsewhere. Each output is summed over `k` in order, as in the
//! reference, but with FMA's single rounding: the test pins the two within
//! `k·ε·Σ|a·b|`. The caller parallelises (the blocks of the LM head, in `train::backward`).

/// The left operand: element `(i, p)` of the `[rows, cols]` matrix is
/// `data[i · row_stride + p · col_stride]`.
#[derive(Clone, Copy, Debug)]
pub struct Strided<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl Strided<'_> {
    fn check(&self) {
        if self.rows > 0 && self.cols > 0 {
            let last = (self.rows - 1)
                .checked_mul(self.row_stride)
                .and_then(|a| a.checked_add((self.cols - 1).checked_mul(self.col_stride)?));
            assert!(
                last.is_some_and(|l| l < self.data.len()),
                "gemm: A [{}, {}] does not fit its data",
                self.rows,
                self.cols
            );
        }
    }
}

/// Whether a row-major `[rows, cols]` matrix with leading dimension `ld` fits in `len`.
fn fits(rows: usize, cols: usize, ld: usize, len: usize) -> bool {
    rows == 0
        || cols == 0
        || (cols <= ld
            && (rows - 1)
                .checked_mul(ld)
                .and_then(|a| a.checked_add(cols))
                .is_some_and(|end| end <= len))
}

fn check(a: &Strided, b: &[f32], ldb: usize, n: usize, c: &[f32], ldc: usize) {
    a.check();
    assert!(fits(a.cols, n, ldb, b.len()), "gemm: B [{}, {n}]", a.cols);
    assert!(fits(a.rows, n, ldc, c.len()), "gemm: C [{}, {n}]", a.rows);
}

// ANCHOR: gemm_reference
/// `C[i, j] = (C[i, j] if accumulate else 0) + Σ_p A[i, p] · B[p, j]` for `i < a.rows`,
/// `j < n`, `p < a.cols`; `B` and `C` are row-major with leading dimensions `ldb`, `ldc`.
pub fn gemm_reference(
    a: &Strided,
    b: &[f32],
    ldb: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    check(a, b, ldb, n, c, ldc);
    for i in 0..a.rows {
        for j in 0..n {
            let mut s = if accumulate { c[i * ldc + j] } else { 0.0 };
            for p in 0..a.cols {
                s += a.data[i * a.row_stride + p * a.col_stride] * b[p * ldb + j];
            }
            c[i * ldc + j] = s;
        }
    }
}
// ANCHOR_END: gemm_reference

/// [`gemm_reference`] with the AVX2+FMA tiles when the CPU has them.
pub fn gemm(
    a: &Strided,
    b: &[f32],
    ldb: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    check(a, b, ldb, n, c, ldc);
    #[cfg(target_arch = "x86_64")]
    if avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (just checked), and `check` proved that every
        // element the tiles address — A's `(i, p)` for i < rows, p < cols, B's and C's
        // `[p or i] · ld + j` for j < n — lies inside its slice.
        unsafe { avx2::gemm(a, b, ldb, n, c, ldc, accumulate) };
        return;
    }
    gemm_reference(a, b, ldb, n, c, ldc, accumulate);
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn avx2_fma() -> bool {
    let cpu = super::policy::cpu();
    cpu.avx2 && cpu.fma
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::Strided;
    use std::arch::x86_64::*;

    /// Rows of a register tile.
    const MR: usize = 6;

    /// # Safety
    /// The CPU supports AVX2 and FMA; `a`, `b`, `c` hold every element the product
    /// addresses (`super::check`).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gemm(
        a: &Strided,
        b: &[f32],
        ldb: usize,
        n: usize,
        c: &mut [f32],
        ldc: usize,
        accumulate: bool,
    ) {
        let m = a.rows;
        let mut j = 0;
        while j < n {
            let width = if n - j >= 16 {
                16
            } else if n - j >= 8 {
                8
            } else {
                0
            };
            if width == 0 {
                // The last n % 8 columns: plain sums, in the same order.
                for i in 0..m {
                    for jj in j..n {
                        let mut s = if accumulate { c[i * ldc + jj] } else { 0.0 };
                        for p in 0..a.cols {
                            s = a.data[i * a.row_stride + p * a.col_stride]
                                .mul_add(b[p * ldb + jj], s);
                        }
                        c[i * ldc + jj] = s;
                    }
                }
                return;
            }
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                let t = Tile {
                    a: a.data.as_ptr().wrapping_add(i * a.row_stride),
                    row_stride: a.row_stride,
                    col_stride: a.col_stride,
                    k: a.cols,
                    b: b.as_ptr().wrapping_add(j),
                    ldb,
                    c: c.as_mut_ptr().wrapping_add(i * ldc + j),
                    ldc,
                    accumulate,
                };
                // SAFETY: rows i..i+rows ≤ m and columns j..j+width ≤ n lie inside the
                // operands (the caller's contract); the CPU features are this function's.
                unsafe {
                    match (rows, width) {
                        (6, 16) => tile::<6, 2>(&t),
                        (5, 16) => tile::<5, 2>(&t),
                        (4, 16) => tile::<4, 2>(&t),
                        (3, 16) => tile::<3, 2>(&t),
                        (2, 16) => tile::<2, 2>(&t),
                        (1, 16) => tile::<1, 2>(&t),
                        (6, _) => tile::<6, 1>(&t),
                        (5, _) => tile::<5, 1>(&t),
                        (4, _) => tile::<4, 1>(&t),
                        (3, _) => tile::<3, 1>(&t),
                        (2, _) => tile::<2, 1>(&t),
                        _ => tile::<1, 1>(&t),
                    }
                }
                i += rows;
            }
            j += width;
        }
    }

    /// One tile's corner in each operand (pointers from `wrapping_add`, dereferenced only
    /// at the in-bounds offsets the tile computes).
    struct Tile {
        a: *const f32,
        row_stride: usize,
        col_stride: usize,
        k: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
    }

    // ANCHOR: gemm_tile
    /// `R` rows × `8·V` columns of `C`, summed over all `k` in registers.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; `A(r, p)` at `a + r·row_stride + p·col_stride` for
    /// r < R, p < k, `B(p, ·)` at `b + p·ldb .. + 8V` and `C(r, ·)` at `c + r·ldc .. + 8V`
    /// lie inside their slices, and nothing else borrows `C`'s elements.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const R: usize, const V: usize>(t: &Tile) {
        let mut acc = [[_mm256_setzero_ps(); V]; R];
        if t.accumulate {
            for (r, row) in acc.iter_mut().enumerate() {
                for (v, x) in row.iter_mut().enumerate() {
                    // SAFETY: C(r, 8v..8v+8) is inside C (the contract).
                    *x = unsafe { _mm256_loadu_ps(t.c.add(r * t.ldc + 8 * v)) };
                }
            }
        }
        for p in 0..t.k {
            let mut bv = [_mm256_setzero_ps(); V];
            for (v, x) in bv.iter_mut().enumerate() {
                // SAFETY: B(p, 8v..8v+8) is inside B (the contract).
                *x = unsafe { _mm256_loadu_ps(t.b.add(p * t.ldb + 8 * v)) };
            }
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: A(r, p) is inside A (the contract).
                let av = _mm256_set1_ps(unsafe { *t.a.add(r * t.row_stride + p * t.col_stride) });
                for (x, b) in row.iter_mut().zip(&bv) {
                    *x = _mm256_fmadd_ps(av, *b, *x);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (v, x) in row.iter().enumerate() {
                // SAFETY: C(r, 8v..8v+8) is inside C, and only this tile writes it.
                unsafe { _mm256_storeu_ps(t.c.add(r * t.ldc + 8 * v), *x) };
            }
        }
    }
    // ANCHOR_END: gemm_tile
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        crate::rand::random_tokens(1, n, seed)
            .into_raw_vec_and_offset()
            .0
    }

    /// Every tile shape and tail, A row-major and transposed, with and without accumulate.
    #[test]
    fn gemm_matches_reference() {
        for &(m, k, n) in &[
            (1, 1, 1),
            (7, 5, 3),
            (13, 32, 40),
            (32, 128, 64),
            (6, 9, 17),
        ] {
            for transposed in [false, true] {
                for accumulate in [false, true] {
                    let data = values(m * k, 1);
                    let (rs, cs) = if transposed { (1, m) } else { (k, 1) };
                    let a = Strided {
                        data: &data,
                        rows: m,
                        cols: k,
                        row_stride: rs,
                        col_stride: cs,
                    };
                    let ldb = n + 3;
                    let b = values(k * ldb, 2);
                    let ldc = n + 1;
                    let c0 = values(m * ldc, 3);
                    let (mut want, mut got) = (c0.clone(), c0.clone());
                    gemm_reference(&a, &b, ldb, n, &mut want, ldc, accumulate);
                    gemm(&a, &b, ldb, n, &mut got, ldc, accumulate);
                    for i in 0..m {
                        for j in 0..n {
                            let mag: f32 = (0..k)
                                .map(|p| (data[i * rs + p * cs] * b[p * ldb + j]).abs())
                                .sum::<f32>()
                                + c0[i * ldc + j].abs();
                            let tol = (k + 1) as f32 * f32::EPSILON * mag + 1e-30;
                            let (w, g) = (want[i * ldc + j], got[i * ldc + j]);
                            assert!((w - g).abs() <= tol, "{m}x{k}x{n} ({i},{j}): {w} vs {g}");
                        }
                        // The padding between rows of C is left alone.
                        assert_eq!(
                            got[i * ldc + n..(i + 1) * ldc],
                            c0[i * ldc + n..(i + 1) * ldc]
                        );
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "gemm: B")]
    fn gemm_checks_sizes() {
        let a = [1.0f32; 4];
        let a = Strided {
            data: &a,
            rows: 2,
            cols: 2,
            row_stride: 2,
            col_stride: 1,
        };
        gemm(&a, &[0.0; 3], 2, 2, &mut [0.0; 4], 2, false);
    }
}
