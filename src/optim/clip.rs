//! Gradient-norm clipping (source 5.6.2): `g ← g · min(1, τ/‖g‖)` over a whole set of
//! tensors, as `torch.nn.utils.clip_grad_norm_` (torch 2.15, `torch/nn/utils/clip_grad.py`)
//! does it. The total norm is the p-norm of the per-tensor p-norms, which for p ≥ 1 (and
//! for ∞) equals the norm of all entries concatenated; torch adds 1e-6 to the norm before
//! dividing and always multiplies by the clamped coefficient.

use ndarray::ArrayD;

// ANCHOR: clip_grad_norm
/// Clips `grads` in place so their total `norm_type`-norm is at most `max_norm`, and
/// returns the total norm before clipping (as PyTorch does). `norm_type` may be any real
/// p, `f32::INFINITY` (max |g|), `f32::NEG_INFINITY` (min |g|) or 0 (count of non-zeros).
pub fn clip_grad_norm(grads: &mut [ArrayD<f32>], max_norm: f32, norm_type: f32) -> f32 {
    let total = total_norm(grads, norm_type);
    let coef = clip_coefficient(total, max_norm);
    for g in grads.iter_mut() {
        g.mapv_inplace(|v| v * coef);
    }
    total
}

/// The factor torch multiplies every gradient by: min(1, max_norm / (total + 1e-6)).
pub fn clip_coefficient(total: f32, max_norm: f32) -> f32 {
    let coef = max_norm / (total + 1e-6);
    // torch.clamp(coef, max=1) keeps a NaN; f32::min would turn it into 1.
    if coef.is_nan() { coef } else { coef.min(1.0) }
}

/// torch's `get_total_norm`: the p-norm of the vector of per-tensor p-norms.
pub fn total_norm(grads: &[ArrayD<f32>], norm_type: f32) -> f32 {
    total_norm_by(grads.iter().map(|g| g.iter().copied()), norm_type)
}

/// [`total_norm`] over any list of tensors, each given as its values.
fn total_norm_by<I: Iterator<Item = f32>>(tensors: impl Iterator<Item = I>, norm_type: f32) -> f32 {
    let per_tensor: Vec<f32> = tensors.map(|g| vector_norm(g, norm_type)).collect();
    if per_tensor.is_empty() {
        return 0.0;
    }
    vector_norm(per_tensor.into_iter(), norm_type)
}
// ANCHOR_END: clip_grad_norm

/// [`clip_grad_norm`] over gradients stored as flat vectors (chapter 12's `Grads`).
pub fn clip_grad_norm_flat(grads: &mut [Vec<f32>], max_norm: f32, norm_type: f32) -> f32 {
    let total = total_norm_flat(grads, norm_type);
    let coef = clip_coefficient(total, max_norm);
    for g in grads.iter_mut() {
        g.iter_mut().for_each(|v| *v *= coef);
    }
    total
}

/// [`total_norm`] over flat vectors.
pub fn total_norm_flat(grads: &[Vec<f32>], norm_type: f32) -> f32 {
    total_norm_by(grads.iter().map(|g| g.iter().copied()), norm_type)
}

/// `torch.linalg.vector_norm(x, ord)` for one flattened tensor, accumulated in f64.
pub fn vector_norm(values: impl Iterator<Item = f32>, ord: f32) -> f32 {
    let abs = values.map(|v| f64::from(v).abs());
    let r = if ord == f32::INFINITY {
        abs.fold(0.0f64, |m, v| if v.is_nan() || v > m { v } else { m })
    } else if ord == f32::NEG_INFINITY {
        abs.fold(
            f64::INFINITY,
            |m, v| if v.is_nan() || v < m { v } else { m },
        )
    } else if ord == 0.0 {
        abs.filter(|&v| v != 0.0).count() as f64
    } else if ord == 1.0 {
        abs.sum()
    } else if ord == 2.0 {
        abs.map(|v| v * v).sum::<f64>().sqrt()
    } else {
        let p = f64::from(ord);
        abs.map(|v| v.powf(p)).sum::<f64>().powf(1.0 / p)
    };
    r as f32
}
