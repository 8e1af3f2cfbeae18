//! Muon (source 5.6.1): momentum SGD whose update matrix is orthogonalised by a
//! Newton–Schulz iteration before it is applied. Mirrors `torch.optim.Muon` (torch 2.15,
//! `torch/optim/_muon.py`) line by line: the quintic iteration with coefficients
//! (3.4445, −4.7750, 2.0315), Frobenius normalisation clamped at eps = 1e-7, the
//! transpose of tall matrices, Nesterov momentum written with `lerp`, decoupled weight
//! decay and the "original" learning-rate adjustment √max(1, rows/cols).
//!
//! One difference is deliberate: torch runs the iteration in bfloat16; here it runs in f32
//! (tests compare with both: f32 to 1e-5, bf16 to 5e-2).

use ndarray::{Array2, ArrayView2, ArrayViewMut2};

/// Keller Jordan's quintic coefficients (a, b, c): p(x) = a·x + b·x³ + c·x⁵.
pub const NS_COEFFICIENTS: (f32, f32, f32) = (3.4445, -4.7750, 2.0315);
/// torch's default number of Newton–Schulz steps.
pub const NS_STEPS: usize = 5;
/// Floor on the Frobenius norm before dividing (torch's `EPS`).
pub const NS_EPS: f32 = 1e-7;

/// How the learning rate is scaled with the matrix shape (torch's `adjust_lr_fn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AdjustLr {
    /// Keller Jordan's rule, torch's default: lr · √max(1, rows/cols).
    #[default]
    Original,
    /// Moonshot's rule (match AdamW's update RMS): lr · 0.2 · √max(rows, cols).
    MatchRmsAdamw,
    /// Bernstein's spectral rule without the clamp: lr · √(rows/cols).
    SpectralUnclamped,
}

/// Hyper-parameters of one Muon parameter group; `Default` is torch's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct MuonConfig {
    pub lr: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub nesterov: bool,
    pub ns_coefficients: (f32, f32, f32),
    pub eps: f32,
    pub ns_steps: usize,
    pub adjust_lr: AdjustLr,
}

impl Default for MuonConfig {
    fn default() -> Self {
        MuonConfig {
            lr: 1e-3,
            weight_decay: 0.1,
            momentum: 0.95,
            nesterov: true,
            ns_coefficients: NS_COEFFICIENTS,
            eps: NS_EPS,
            ns_steps: NS_STEPS,
            adjust_lr: AdjustLr::Original,
        }
    }
}

/// Muon over a list of 2-D parameters: the config plus one momentum buffer per parameter.
#[derive(Clone, Debug)]
pub struct Muon {
    pub config: MuonConfig,
    buffers: Vec<Option<Array2<f32>>>,
}

// ANCHOR: newton_schulz
/// Approximate orthogonalisation `G ↦ U S' Vᵀ` (S' ≈ I) by `steps` quintic Newton–Schulz
/// iterations, exactly as torch's `_zeropower_via_newtonschulz` but in f32.
pub fn newton_schulz(g: &Array2<f32>, steps: usize) -> Array2<f32> {
    newton_schulz_with(g, NS_COEFFICIENTS, steps, NS_EPS)
}

/// [`newton_schulz`] with explicit coefficients and eps.
pub fn newton_schulz_with(
    g: &Array2<f32>,
    (a, b, c): (f32, f32, f32),
    steps: usize,
    eps: f32,
) -> Array2<f32> {
    // Work on the wide orientation, so the Gram matrix X·Xᵀ is the smaller one.
    let tall = g.nrows() > g.ncols();
    let mut x = if tall { g.t().to_owned() } else { g.clone() };
    // Dividing by the Frobenius norm puts every singular value in [0, 1].
    let norm = frobenius_norm(&x).max(eps);
    x.mapv_inplace(|v| v / norm);
    for _ in 0..steps {
        let gram = x.dot(&x.t()); // A = X Xᵀ
        let gram_update = &gram * b + &(gram.dot(&gram) * c); // B = b·A + c·A²
        x = &x * a + &gram_update.dot(&x); // X ← a·X + B·X
    }
    if tall {
        x.t().as_standard_layout().into_owned()
    } else {
        x
    }
}
// ANCHOR_END: newton_schulz

/// The scalar polynomial one Newton–Schulz step applies to each singular value.
pub fn ns_polynomial(x: f64, (a, b, c): (f32, f32, f32)) -> f64 {
    let (a, b, c) = (f64::from(a), f64::from(b), f64::from(c));
    a * x + b * x.powi(3) + c * x.powi(5)
}

/// torch's `_adjust_lr`: the learning rate actually applied to a `rows × cols` matrix.
pub fn adjust_lr(lr: f64, rule: AdjustLr, rows: usize, cols: usize) -> f64 {
    let (a, b) = (rows as f64, cols as f64);
    let ratio = match rule {
        AdjustLr::Original => (a / b).max(1.0).sqrt(),
        AdjustLr::MatchRmsAdamw => 0.2 * a.max(b).sqrt(),
        AdjustLr::SpectralUnclamped => (a / b).sqrt(),
    };
    lr * ratio
}

/// One Muon update of one parameter, in place (torch's `_single_tensor_muon` body).
/// `buf` is the momentum buffer (zeros before the first step).
pub fn muon_update(
    param: &mut Array2<f32>,
    grad: &Array2<f32>,
    buf: &mut Array2<f32>,
    cfg: &MuonConfig,
) {
    muon_update_view(param.view_mut(), grad.view(), buf.view_mut(), cfg);
}

// ANCHOR: muon_step
/// [`muon_update`] on borrowed views, so a `[rows, cols]` matrix stored in a flat slice
/// (chapter 12's parameters, one expert of a fused `[E, rows, cols]` tensor) can be
/// updated in place: see [`muon_update_slice`].
pub fn muon_update_view(
    mut param: ArrayViewMut2<f32>,
    grad: ArrayView2<f32>,
    mut buf: ArrayViewMut2<f32>,
    cfg: &MuonConfig,
) {
    let mu = cfg.momentum as f32;
    // buf ← μ·buf + (1 − μ)·g  (an exponential average, written as a lerp as torch does)
    ndarray::Zip::from(&mut buf)
        .and(&grad)
        .for_each(|b, &g| *b = lerp(*b, g, (1.0 - cfg.momentum) as f32));
    // Nesterov: look ahead along the momentum, update = (1 − μ)·g + μ·buf
    let update = if cfg.nesterov {
        ndarray::Zip::from(&grad)
            .and(&buf)
            .map_collect(|&g, &b| lerp(g, b, mu))
    } else {
        buf.to_owned()
    };
    let ortho = newton_schulz_with(&update, cfg.ns_coefficients, cfg.ns_steps, cfg.eps);
    let adjusted_lr = adjust_lr(cfg.lr, cfg.adjust_lr, param.nrows(), param.ncols());
    // Decoupled weight decay uses the unadjusted lr; the step uses the adjusted one.
    let decay = (1.0 - cfg.lr * cfg.weight_decay) as f32;
    let alpha = -adjusted_lr as f32;
    ndarray::Zip::from(&mut param)
        .and(&ortho)
        .for_each(|p, &o| *p = *p * decay + alpha * o);
}
// ANCHOR_END: muon_step

/// [`muon_update`] on a row-major `rows × cols` matrix held in flat slices (parameter,
/// gradient, momentum buffer, each `rows · cols` long). Panics on a length mismatch, a
/// programming error of the caller.
pub fn muon_update_slice(
    param: &mut [f32],
    grad: &[f32],
    buf: &mut [f32],
    (rows, cols): (usize, usize),
    cfg: &MuonConfig,
) {
    let shape = (rows, cols);
    let param = ArrayViewMut2::from_shape(shape, param).expect("muon_update_slice: param");
    let grad = ArrayView2::from_shape(shape, grad).expect("muon_update_slice: grad");
    let buf = ArrayViewMut2::from_shape(shape, buf).expect("muon_update_slice: buffer");
    muon_update_view(param, grad, buf, cfg);
}

impl Muon {
    pub fn new(config: MuonConfig) -> Muon {
        Muon {
            config,
            buffers: Vec::new(),
        }
    }

    /// One optimizer step over all parameters (`params[i]` is updated with `grads[i]`).
    /// Panics if the lists differ in length or a gradient's shape differs from its
    /// parameter's: both are programming errors, not user input.
    pub fn step(&mut self, params: &mut [Array2<f32>], grads: &[Array2<f32>]) {
        assert_eq!(params.len(), grads.len(), "Muon::step: params vs grads");
        if self.buffers.len() < params.len() {
            self.buffers.resize(params.len(), None);
        }
        for ((p, g), buf) in params.iter_mut().zip(grads).zip(&mut self.buffers) {
            assert_eq!(p.dim(), g.dim(), "Muon::step: gradient shape");
            let buf = buf.get_or_insert_with(|| Array2::zeros(g.dim()));
            muon_update(p, g, buf, &self.config);
        }
    }
}

/// torch's `lerp(start, end, w)`: the two algebraically equal forms are chosen by |w| so
/// the result is exact at both ends (`aten/src/ATen/native/Lerp.h`).
pub fn lerp(start: f32, end: f32, weight: f32) -> f32 {
    if weight.abs() < 0.5 {
        start + weight * (end - start)
    } else {
        end - (end - start) * (1.0 - weight)
    }
}

/// ‖x‖_F, accumulated in f64.
pub fn frobenius_norm(x: &Array2<f32>) -> f32 {
    x.iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt() as f32
}
