//! `anatomy train` (chapter 12): parses the flags into a [`TrainJob`], runs it, prints the
//! summary. Every option a run depends on is saved with its checkpoint, so `--resume`
//! takes none of them.

use llm_anatomy::train::trainer::{self, TrainJob, TrainOptions};
use std::path::PathBuf;

/// Train a Qwen3-MoE from scratch on a text corpus; DIR is a Hugging Face checkpoint
/// (config.json + model.safetensors) that transformers loads.
#[derive(clap::Args)]
pub struct TrainArgs {
    /// The checkpoint directory (model, optimiser state, train_log.jsonl).
    #[arg(long)]
    out: PathBuf,
    /// The model's config.json.
    #[arg(long, default_value = "data/train/qwen3-moe-anatomy.json")]
    config: PathBuf,
    /// A directory of UTF-8 .txt documents.
    #[arg(long, default_value = "data/corpus")]
    data: PathBuf,
    /// The tokenizer: a tiktoken file or a tokenizer.json.
    #[arg(long, default_value = "data/qwen.tiktoken")]
    vocab: PathBuf,
    /// Go on from the checkpoint in --out, with the options saved there.
    #[arg(long)]
    resume: bool,
    /// Start from the model of this checkpoint (its config.json; a fresh optimiser):
    /// fine-tuning.
    #[arg(long, conflicts_with = "resume")]
    init: Option<PathBuf>,
    /// No update for the routers (`mlp.gate.weight`); not saved: give it again with --resume.
    #[arg(long)]
    freeze_router: bool,
    /// Stop with a checkpoint after this step (resume later with --resume).
    #[arg(long)]
    stop_after: Option<u64>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// The summary as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    options: OptionFlags,
}

/// The run's options; each defaults to `TrainOptions::default()`.
#[derive(clap::Args)]
struct OptionFlags {
    /// Optimizer steps of the whole run.
    #[arg(long)]
    steps: Option<u64>,
    /// Seed of the initial weights and of the batch order.
    #[arg(long)]
    seed: Option<u64>,
    /// Sequences per optimizer step.
    #[arg(long)]
    batch_size: Option<usize>,
    /// Tokens per training sequence (at most the config's max_position_embeddings).
    #[arg(long)]
    seq_len: Option<usize>,
    /// Peak learning rate of AdamW (embedding, head, norms, router).
    #[arg(long)]
    lr: Option<f64>,
    /// Peak learning rate of Muon (hidden matrices; Moonlight's RMS-matched scaling).
    #[arg(long)]
    muon_lr: Option<f64>,
    /// AdamW for every parameter.
    #[arg(long)]
    no_muon: bool,
    /// Decoupled weight decay of AdamW and Muon.
    #[arg(long)]
    weight_decay: Option<f64>,
    /// Linear warm-up steps before the decay.
    #[arg(long)]
    warmup: Option<u64>,
    /// cosine, linear or constant.
    #[arg(long)]
    decay: Option<String>,
    /// The schedule's floor as a fraction of the peak, in [0, 1].
    #[arg(long)]
    min_lr_rate: Option<f64>,
    /// Global gradient-norm threshold (0 = off).
    #[arg(long)]
    grad_clip: Option<f32>,
    /// QK-clip threshold τ (0 = off).
    #[arg(long)]
    qk_clip: Option<f32>,
    /// Load-balancing loss weight (default: the config's; 0 = off).
    #[arg(long)]
    aux_loss_coef: Option<f32>,
    /// Router z-loss weight.
    #[arg(long)]
    z_loss: Option<f32>,
    /// Aux-loss-free balancing: router bias step per update (0 = off).
    #[arg(long)]
    router_bias_speed: Option<f32>,
    /// Held-out loss every this many steps (0 = only at the end).
    #[arg(long)]
    eval_every: Option<u64>,
    /// Held-out batches per evaluation; at most 10000.
    #[arg(long)]
    eval_batches: Option<usize>,
    /// A checkpoint every this many steps (0 = only at the end).
    #[arg(long)]
    checkpoint_every: Option<u64>,
    /// The share of the corpus's documents held out for evaluation.
    #[arg(long)]
    heldout_fraction: Option<f64>,
}

impl OptionFlags {
    /// The options, and whether any flag was given.
    fn options(&self) -> (TrainOptions, bool) {
        let d = TrainOptions::default();
        let given = self.steps.is_some()
            || self.seed.is_some()
            || self.batch_size.is_some()
            || self.seq_len.is_some()
            || self.lr.is_some()
            || self.muon_lr.is_some()
            || self.no_muon
            || self.weight_decay.is_some()
            || self.warmup.is_some()
            || self.decay.is_some()
            || self.min_lr_rate.is_some()
            || self.grad_clip.is_some()
            || self.qk_clip.is_some()
            || self.aux_loss_coef.is_some()
            || self.z_loss.is_some()
            || self.router_bias_speed.is_some()
            || self.eval_every.is_some()
            || self.eval_batches.is_some()
            || self.checkpoint_every.is_some()
            || self.heldout_fraction.is_some();
        let o = TrainOptions {
            steps: self.steps.unwrap_or(d.steps),
            seed: self.seed.unwrap_or(d.seed),
            batch_size: self.batch_size.unwrap_or(d.batch_size),
            seq_len: self.seq_len.unwrap_or(d.seq_len),
            adamw_lr: self.lr.unwrap_or(d.adamw_lr),
            muon_lr: self.muon_lr.or(self.lr).unwrap_or(d.muon_lr),
            muon: !self.no_muon,
            weight_decay: self.weight_decay.unwrap_or(d.weight_decay),
            warmup_steps: self.warmup.unwrap_or(d.warmup_steps),
            decay: self.decay.clone().unwrap_or(d.decay.clone()),
            min_lr_rate: self.min_lr_rate.unwrap_or(d.min_lr_rate),
            grad_clip: self.grad_clip.unwrap_or(d.grad_clip),
            qk_clip_tau: self.qk_clip.unwrap_or(d.qk_clip_tau),
            aux_loss_coef: self.aux_loss_coef.or(d.aux_loss_coef),
            z_loss_coef: self.z_loss.unwrap_or(d.z_loss_coef),
            router_bias_speed: self.router_bias_speed.unwrap_or(d.router_bias_speed),
            eval_every: self.eval_every.unwrap_or(d.eval_every),
            eval_batches: self.eval_batches.unwrap_or(d.eval_batches),
            checkpoint_every: self.checkpoint_every.unwrap_or(d.checkpoint_every),
            heldout_fraction: self.heldout_fraction.unwrap_or(d.heldout_fraction),
            ..d
        };
        (o, given)
    }
}

pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let (options, given) = args.options.options();
    if args.resume && given {
        return Err(llm_anatomy::Error::Invalid(format!(
            "train --resume: the run's options are in {}; give no option flags \
             (only --stop-after, --threads, --data, --vocab, --quiet, --json)",
            args.out.join("trainer_state.json").display()
        ))
        .into());
    }
    if let Some(n) = args.threads {
        llm_anatomy::limits::check(
            "train",
            "--threads",
            n as u128,
            llm_anatomy::limits::THREADS,
        )
        .map_err(llm_anatomy::Error::from)?;
        if n == 0 {
            return Err(llm_anatomy::Error::Invalid("train: --threads must be ≥ 1".into()).into());
        }
        // Only fails if a pool already exists, which nothing before this creates.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
    let job = TrainJob {
        out: args.out,
        config: args.config,
        data: args.data,
        vocab: args.vocab,
        options,
        resume: args.resume,
        stop_after: args.stop_after,
        progress: !args.quiet,
    };
    let summary = trainer::run_with(&job, args.init.as_deref(), args.freeze_router)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", trainer::text_summary(&summary));
    }
    Ok(())
}
