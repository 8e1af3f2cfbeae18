//! A small singular value decomposition (one-sided Jacobi, in f64), so Newton–Schulz can be
//! compared with the exact polar factor `U Vᵀ`. One-sided Jacobi rotates pairs of columns
//! until they are mutually orthogonal; the column norms are then the singular values. It is
//! slow for big matrices (O(n³) per sweep) and accurate to f64 rounding, which is what a
//! reference needs.

use ndarray::{Array2, Axis};

/// `a = u · diag(s) · vt`, singular values in descending order. For an `m × n` input,
/// `u` is `m × k`, `vt` is `k × n` with `k = min(m, n)` (the thin SVD).
#[derive(Clone, Debug)]
pub struct Svd {
    pub u: Array2<f64>,
    pub s: Vec<f64>,
    pub vt: Array2<f64>,
}

/// Thin SVD by one-sided Jacobi rotations (Hestenes). Wide inputs are handled through
/// their transpose.
pub fn svd(a: &Array2<f64>) -> Svd {
    if a.nrows() < a.ncols() {
        let t = svd(&a.t().to_owned());
        return Svd {
            u: t.vt.t().to_owned(),
            s: t.s,
            vt: t.u.t().to_owned(),
        };
    }
    let n = a.ncols();
    let mut u = a.clone();
    let mut v = Array2::<f64>::eye(n);
    for _sweep in 0..60 {
        let mut rotated = false;
        for p in 0..n {
            for q in p + 1..n {
                let (up, uq) = (u.column(p), u.column(q));
                let alpha = up.dot(&up);
                let beta = uq.dot(&uq);
                let gamma = up.dot(&uq);
                if gamma.abs() <= 1e-15 * (alpha * beta).sqrt() || gamma == 0.0 {
                    continue;
                }
                rotated = true;
                // The rotation that zeroes the (p, q) entry of the column Gram matrix.
                let zeta = (beta - alpha) / (2.0 * gamma);
                let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let c = 1.0 / (1.0 + t * t).sqrt();
                let s = c * t;
                rotate_columns(&mut u, p, q, c, s);
                rotate_columns(&mut v, p, q, c, s);
            }
        }
        if !rotated {
            break;
        }
    }
    // Column norms are the singular values; normalising the columns gives U.
    let mut order: Vec<(f64, usize)> = (0..n)
        .map(|j| (u.column(j).dot(&u.column(j)).sqrt(), j))
        .collect();
    order.sort_by(|x, y| y.0.total_cmp(&x.0));
    let mut uo = Array2::<f64>::zeros((a.nrows(), n));
    let mut vt = Array2::<f64>::zeros((n, n));
    let mut s = Vec::with_capacity(n);
    for (k, &(sigma, j)) in order.iter().enumerate() {
        s.push(sigma);
        if sigma > 0.0 {
            uo.column_mut(k).assign(&(&u.column(j) / sigma));
        }
        vt.row_mut(k).assign(&v.column(j));
    }
    Svd { u: uo, s, vt }
}

/// The orthogonal polar factor `U Vᵀ` of `a`: the orthogonal matrix nearest to `a` in the
/// Frobenius norm, and what Newton–Schulz approximates.
pub fn polar_factor(a: &Array2<f64>) -> Array2<f64> {
    let d = svd(a);
    d.u.dot(&d.vt)
}

/// Singular values only, descending.
pub fn singular_values(a: &Array2<f64>) -> Vec<f64> {
    svd(a).s
}

/// Widens an f32 matrix to f64.
pub fn to_f64(a: &Array2<f32>) -> Array2<f64> {
    a.mapv(f64::from)
}

fn rotate_columns(m: &mut Array2<f64>, p: usize, q: usize, c: f64, s: f64) {
    let mut cols = m.lanes_mut(Axis(0)).into_iter();
    // Column lanes come out in order; take p and q without aliasing.
    let mut cp = None;
    let mut cq = None;
    for (j, col) in cols.by_ref().enumerate() {
        if j == p {
            cp = Some(col);
        } else if j == q {
            cq = Some(col);
            break;
        }
    }
    if let (Some(mut cp), Some(mut cq)) = (cp, cq) {
        for (x, y) in cp.iter_mut().zip(cq.iter_mut()) {
            let (xp, xq) = (*x, *y);
            *x = c * xp - s * xq;
            *y = s * xp + c * xq;
        }
    }
}
