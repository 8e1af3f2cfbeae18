//! Chapter 12 — `anatomy grad`: the loss and every parameter's gradient for one sequence,
//! written as a safetensors file to set beside transformers' autograd.

use super::{LossOptions, Losses, loss_and_grads};
use crate::error::{Error, Result};
use crate::train::params::{Params, write_safetensors_f32};
use std::path::Path;

/// Loads the checkpoint in `model_dir`, computes `model(input_ids=ids, labels=ids)`'s
/// loss and gradients (with the load-balancing term when the config's
/// `output_router_logits`), and writes `out`: F32 scalars `"loss"`, `"ce_loss"`,
/// `"aux_loss"` (when computed) and one gradient per parameter under the checkpoint's
/// own names and shapes.
pub fn write_grads(model_dir: &Path, ids: &[u32], out: &Path) -> Result<Losses> {
    if !model_dir.is_dir() {
        return Err(Error::Invalid(format!(
            "{}: no such model directory (config.json + safetensors)",
            model_dir.display()
        )));
    }
    if ids.len() < 2 {
        return Err(Error::Invalid(format!(
            "--ids: {} token id(s); the loss needs at least 2 (each predicts the next)",
            ids.len()
        )));
    }
    let p = Params::load(model_dir)?;
    let opts = LossOptions::from_config(&p.config);
    let mut grads = p.zeros_like();
    let losses = loss_and_grads(&p, &[ids.to_vec()], &opts, &mut grads)?;
    let scalars: Vec<(&str, [f32; 1])> = [
        Some(("loss", [losses.loss])),
        Some(("ce_loss", [losses.ce_loss])),
        losses.aux_loss.map(|a| ("aux_loss", [a])),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut tensors: Vec<(&str, &[usize], &[f32])> =
        scalars.iter().map(|(n, v)| (*n, &[][..], &v[..])).collect();
    for (param, g) in p.params.iter().zip(&grads.grads) {
        tensors.push((param.name.as_str(), param.shape.as_slice(), g.as_slice()));
    }
    write_safetensors_f32(out, &tensors)?;
    Ok(losses)
}
