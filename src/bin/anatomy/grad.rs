//! `anatomy grad MODEL_DIR --ids 1,2,3 --out FILE.safetensors` (chapter 12): the loss and
//! every parameter's gradient, as transformers' autograd computes them.

use llm_anatomy::{tokenizer, train};
use std::path::Path;

pub fn run(model_dir: &Path, ids: &str, out: &Path) -> anyhow::Result<()> {
    let ids = tokenizer::parse_id_ranges(ids)?;
    let losses = train::backward::grad_file::write_grads(model_dir, &ids, out)?;
    let aux = losses
        .aux_loss
        .map(|a| format!(", aux_loss {a:.6}"))
        .unwrap_or_default();
    eprintln!(
        "loss {:.6} (ce_loss {:.6}{aux}) over {} predicted tokens; wrote the gradients to {}",
        losses.loss,
        losses.ce_loss,
        losses.tokens,
        out.display()
    );
    Ok(())
}
