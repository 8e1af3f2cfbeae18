//! The weighted sum of expert outputs as one block-sparse matrix product.
//!
//! Source S0 5.4.5. Stacking the k expert outputs `v₁ … v_k ∈ ℝᵈ` into one vector of
//! length `k·d`, the router's weighted sum is a matrix product:
//! `Σ αᵢ vᵢ = A(α) · [v₁; …; v_k]` with `A(α) = [α₁I_d  α₂I_d  …  α_kI_d] = αᵀ ⊗ I_d`,
//! a `d × kd` matrix with only `k·d` non-zeros — hence "block-sparse". The text checks it
//! for k = 3, d = 2 and prints `y = [0.6, 4.1]`, but does not give α or the vᵢ; the ones
//! in [`text_example`] are ours, chosen so that its numbers come out (claim
//! `moe.block_sparse`).

use ndarray::{Array1, Array2, linalg::kron};

/// The example's pieces and both ways of computing y.
#[derive(Clone, Debug)]
pub struct BlockSparse {
    pub alpha: Array1<f64>,
    pub v: Vec<Array1<f64>>,
    /// `A(α)`, `d × kd`.
    pub a: Array2<f64>,
    /// `[v₁; …; v_k]`, length `kd`.
    pub v_concat: Array1<f64>,
    pub y_matrix: Array1<f64>,
    pub y_sum: Array1<f64>,
}

// ANCHOR: block_matrix
/// `A(α) = αᵀ ⊗ I_d`: the row vector α Kronecker the identity.
pub fn block_matrix(alpha: &Array1<f64>, d: usize) -> Array2<f64> {
    let row = alpha.view().insert_axis(ndarray::Axis(0));
    kron(&row, &Array2::eye(d))
}
// ANCHOR_END: block_matrix

/// `Σ αᵢ vᵢ`, accumulated in order.
pub fn weighted_sum(alpha: &Array1<f64>, v: &[Array1<f64>]) -> Array1<f64> {
    let mut y = Array1::zeros(v[0].len());
    for (a, vi) in alpha.iter().zip(v) {
        y.scaled_add(*a, vi);
    }
    y
}

/// Both forms for given weights and vectors.
pub fn compute(alpha: Array1<f64>, v: Vec<Array1<f64>>) -> BlockSparse {
    let d = v[0].len();
    let v_concat = Array1::from_iter(v.iter().flat_map(|vi| vi.iter().copied()));
    let a = block_matrix(&alpha, d);
    let y_matrix = a.dot(&v_concat);
    let y_sum = weighted_sum(&alpha, &v);
    BlockSparse {
        alpha,
        v,
        a,
        v_concat,
        y_matrix,
        y_sum,
    }
}

/// k = 3, d = 2. Our choice: α = (0.5, 0.3, 0.2) — a valid top-3 weight vector (positive,
/// sums to 1) — and v₁ = (1, 3), v₂ = (0, 5), v₃ = (0.5, 5.5).
pub fn text_example() -> BlockSparse {
    compute(
        Array1::from(vec![0.5, 0.3, 0.2]),
        vec![
            Array1::from(vec![1.0, 3.0]),
            Array1::from(vec![0.0, 5.0]),
            Array1::from(vec![0.5, 5.5]),
        ],
    )
}

/// The example as the book prints it.
pub fn render_markdown(b: &BlockSparse) -> String {
    let vec = |x: &Array1<f64>| {
        let parts: Vec<String> = x.iter().map(|v| format!("{v}")).collect();
        format!("[{}]", parts.join(", "))
    };
    let mut s = String::from("```text\n");
    s.push_str(&format!("alpha     = {}\n", vec(&b.alpha)));
    for (i, v) in b.v.iter().enumerate() {
        s.push_str(&format!("v{}        = {}\n", i + 1, vec(v)));
    }
    s.push_str(&format!(
        "V_concat  = {}   shape ({},)\n",
        vec(&b.v_concat),
        b.v_concat.len()
    ));
    s.push_str(&format!(
        "A(alpha)  = alpha^T (x) I_{}   shape ({}, {})\n",
        b.a.nrows(),
        b.a.nrows(),
        b.a.ncols()
    ));
    for row in b.a.rows() {
        let cells: Vec<String> = row.iter().map(|v| format!("{v:>4}")).collect();
        s.push_str(&format!("            [{}]\n", cells.join(" ")));
    }
    s.push_str(&format!("A @ V_concat          = {}\n", vec(&b.y_matrix)));
    s.push_str(&format!("sum_i alpha_i * v_i   = {}\n", vec(&b.y_sum)));
    s.push_str(&format!(
        "identical: {}\n```\n",
        b.y_matrix.iter().zip(&b.y_sum).all(|(a, c)| a == c)
    ));
    s
}
