//! `anatomy grad MODEL_DIR --ids 1,2,3 --out FILE.safetensors` (chapter 12): the loss and
//! every parameter's gradient, as transformers' autograd computes them.

use llm_anatomy::{tokenizer, train};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct GradArgs {
    /// config.json + safetensors (single file or sharded with an index).
    model_dir: PathBuf,
    /// Comma-separated token ids (at least 2).
    #[arg(long)]
    ids: String,
    /// The safetensors file the loss and gradients go to.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: GradArgs) -> anyhow::Result<()> {
    let (model_dir, out) = (&args.model_dir, &args.out);
    let ids = tokenizer::parse_id_ranges(&args.ids)?;
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
