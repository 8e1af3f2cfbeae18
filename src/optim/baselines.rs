//! The two optimizers Muon is measured against, written as torch 2.15 writes them
//! (`torch/optim/sgd.py`, `torch/optim/adam.py`, default options, no weight decay):
//! SGD with heavy-ball momentum and Adam with bias correction. They update `ndarray`
//! matrices in place and keep their state per parameter, like Muon does.

use super::muon::lerp;
use ndarray::{Array2, Zip};

/// SGD with momentum μ (dampening 0, not Nesterov): buf ← μ·buf + g, p ← p − lr·buf.
#[derive(Clone, Debug)]
pub struct SgdMomentum {
    pub lr: f64,
    pub momentum: f64,
    buffers: Vec<Option<Array2<f32>>>,
}

/// Adam: m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g², p ← p − lr/(1−β₁ᵗ) · m / (√v/√(1−β₂ᵗ) + ε).
#[derive(Clone, Debug)]
pub struct Adam {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    step: u32,
    m: Vec<Array2<f32>>,
    v: Vec<Array2<f32>>,
}

impl SgdMomentum {
    pub fn new(lr: f64, momentum: f64) -> Self {
        SgdMomentum {
            lr,
            momentum,
            buffers: Vec::new(),
        }
    }

    pub fn step(&mut self, params: &mut [Array2<f32>], grads: &[Array2<f32>]) {
        assert_eq!(
            params.len(),
            grads.len(),
            "SgdMomentum::step: params vs grads"
        );
        if self.buffers.len() < params.len() {
            self.buffers.resize(params.len(), None);
        }
        let (mu, lr) = (self.momentum as f32, -self.lr as f32);
        for ((p, g), buf) in params.iter_mut().zip(grads).zip(&mut self.buffers) {
            // torch starts the buffer at the first gradient itself.
            match buf {
                None => *buf = Some(g.clone()),
                Some(b) => Zip::from(b).and(g).for_each(|b, &g| *b = *b * mu + g),
            }
            let b = buf.as_ref().expect("just set");
            Zip::from(p).and(b).for_each(|p, &b| *p += lr * b);
        }
    }
}

impl Adam {
    /// torch's defaults apart from lr: betas (0.9, 0.999), eps 1e-8.
    pub fn new(lr: f64) -> Self {
        Adam {
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            step: 0,
            m: Vec::new(),
            v: Vec::new(),
        }
    }

    pub fn step(&mut self, params: &mut [Array2<f32>], grads: &[Array2<f32>]) {
        assert_eq!(params.len(), grads.len(), "Adam::step: params vs grads");
        if self.m.is_empty() {
            self.m = grads.iter().map(|g| Array2::zeros(g.dim())).collect();
            self.v = self.m.clone();
        }
        self.step += 1;
        let (b1, b2) = self.betas;
        let t = i32::try_from(self.step).unwrap_or(i32::MAX);
        let step_size = (self.lr / (1.0 - b1.powi(t))) as f32;
        let bc2_sqrt = (1.0 - b2.powi(t)).sqrt() as f32;
        let (w1, b2f, one_minus_b2, eps) = (
            (1.0 - b1) as f32,
            b2 as f32,
            (1.0 - b2) as f32,
            self.eps as f32,
        );
        for (((p, g), m), v) in params
            .iter_mut()
            .zip(grads)
            .zip(&mut self.m)
            .zip(&mut self.v)
        {
            Zip::from(&mut *m)
                .and(g)
                .for_each(|m, &g| *m = lerp(*m, g, w1));
            Zip::from(&mut *v)
                .and(g)
                .for_each(|v, &g| *v = *v * b2f + one_minus_b2 * g * g);
            Zip::from(p).and(&*m).and(&*v).for_each(|p, &m, &v| {
                let denom = v.sqrt() / bc2_sqrt + eps;
                *p -= step_size * (m / denom);
            });
        }
    }
}
