//! `anatomy experiments` (chapter 13): runs the training experiments by id and prints
//! each one's summary; `--record` writes into `data/train/experiments/<id>/`, the
//! results the claims registry reads.

use llm_anatomy::train::experiments::{self, ExperimentOptions};
use std::path::PathBuf;

/// Run chapter 13's training experiments (claim ids such as train.collapse, or "all").
#[derive(clap::Args)]
pub struct ExperimentsArgs {
    /// Experiment ids, or "all".
    #[arg(required = true)]
    ids: Vec<String>,
    /// Where each experiment's runs and results.json go (a subdirectory per id).
    #[arg(long, conflicts_with = "record", required_unless_present = "record")]
    out: Option<PathBuf>,
    /// Write into the crate's data/train/experiments/ (the recorded results).
    #[arg(long)]
    record: bool,
    /// A few steps of each run: exercises the code path, not the recorded numbers.
    #[arg(long)]
    short: bool,
    /// A directory of UTF-8 .txt documents.
    #[arg(long, default_value = "data/corpus")]
    data: PathBuf,
    /// The tokenizer: a tiktoken file or a tokenizer.json.
    #[arg(long, default_value = "data/qwen.tiktoken")]
    vocab: PathBuf,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(args: ExperimentsArgs) -> anyhow::Result<()> {
    let ids: Vec<String> = if args.ids.iter().any(|i| i == "all") {
        experiments::all_ids()
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        args.ids.clone()
    };
    for id in &ids {
        let out = match &args.out {
            Some(dir) => dir.join(id),
            None => experiments::recorded_dir(id),
        };
        let opts = ExperimentOptions {
            out,
            data: args.data.clone(),
            vocab: args.vocab.clone(),
            short: args.short,
            threads: args.threads.unwrap_or(0),
        };
        let start = std::time::Instant::now();
        let summary = experiments::run(id, &opts)?;
        println!("{id} ({:.0} s)\n{summary}", start.elapsed().as_secs_f64());
    }
    Ok(())
}
