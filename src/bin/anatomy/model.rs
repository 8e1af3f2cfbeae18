//! Commands that run a model: `logits`, `generate`, `router-stats`, `lost-in-middle` and
//! `bench`. MODEL is a Hugging Face directory (config.json + safetensors) or a .gguf file.

use crate::text::vocab_or_default;
use llm_anatomy::tokenizer::{self, Tokenizer};
use llm_anatomy::{bench as bench_lib, qwen3};
use std::path::{Path, PathBuf};

/// Opens MODEL (config.json + safetensors, or a .gguf file), views its weights with a
/// progress bar on a terminal, and runs `f` on the model; with `reference`, on every weight
/// widened to f32 and with the clear kernels.
pub fn with_model<T>(
    dir: &Path,
    reference: bool,
    f: impl FnOnce(&qwen3::Model) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let (config, file) = qwen3::open(dir)?;
    let bar = indicatif::ProgressBar::new(config.num_hidden_layers as u64).with_message("layers");
    bar.set_style(
        indicatif::ProgressStyle::with_template("loading {msg} {bar:30} {pos}/{len}")
            .expect("static template"),
    );
    let progress = |done: usize, _| bar.set_position(done as u64);
    let store = match reference {
        true => Some(qwen3::F32Tensors::of((&file).into())?),
        false => None,
    };
    let model = match &store {
        Some(s) => qwen3::Model::new_with_progress(config, s, progress)?.with_reference_kernels(),
        None => qwen3::Model::new_with_progress(config, &file, progress)?,
    };
    bar.finish_and_clear();
    f(&model)
}

/// One token as the tables show it: its text quoted, or a note for an id the vocabulary
/// has no token for (the padding rows past it).
fn shown(tok: &Tokenizer, id: u32) -> String {
    match tok.decode(&[id]) {
        Ok(text) => format!("{text:?}"),
        Err(_) => "(no token)".into(),
    }
}

#[derive(clap::Args)]
pub struct LogitsArgs {
    /// config.json + safetensors (single file or sharded with an index), or a .gguf file.
    model_dir: PathBuf,
    /// Comma-separated token ids, e.g. 1,2,3.
    #[arg(long)]
    ids: String,
    /// The safetensors file the logits go to (optional with --top).
    #[arg(long, required_unless_present = "top")]
    out: Option<PathBuf>,
    /// Every weight dequantised to f32 and the clear (reference) kernels.
    #[arg(long)]
    reference: bool,
    /// Print the K most likely next tokens of every position, decoded, with their logit
    /// and probability; at most 1000.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=1000))]
    top: Option<u32>,
    /// The tokenizer for --top (default: the model's own, MODEL_DIR/tokenizer.json, else
    /// data/qwen.tiktoken).
    #[arg(long, requires = "top")]
    vocab: Option<PathBuf>,
}

pub fn logits(args: LogitsArgs) -> anyhow::Result<()> {
    let ids = tokenizer::parse_id_ranges(&args.ids)?;
    let tok = args
        .top
        .map(|_| vocab_or_default(args.vocab.as_deref(), Some(&args.model_dir)))
        .transpose()?;
    with_model(&args.model_dir, args.reference, |model| {
        let output = model.logits(&ids)?;
        let vocab = model.config.vocab_size;
        if let Some(out) = &args.out {
            qwen3::save_logits(out, &output, vocab)?;
            eprintln!(
                "wrote logits [{}, {vocab}] to {}",
                output.rows,
                out.display()
            );
        }
        if let (Some(k), Some(tok)) = (args.top, &tok) {
            print!("{}", top_k_text(&output, vocab, &ids, k as usize, tok));
        }
        Ok(())
    })
}

/// Per position: the input token, then the `k` largest logits, each with its token and
/// its softmax probability over the whole row.
fn top_k_text(out: &qwen3::Output, vocab: usize, ids: &[u32], k: usize, tok: &Tokenizer) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for (pos, row) in out.logits.chunks(vocab).take(out.rows).enumerate() {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row.iter().map(|&l| f64::from(l - max).exp()).sum();
        let input = ids.get(pos).copied().unwrap_or_default();
        let _ = writeln!(s, "{pos:>4} {input:>7} {}", shown(tok, input));
        for i in llm_anatomy::moe::router::top_k_indices(row, k.min(vocab)) {
            let p = f64::from(row[i] - max).exp() / sum;
            let id = i as u32;
            let _ = writeln!(
                s,
                "     -> {id:>7} {:<20} logit {:>9.4}  p {p:.4}",
                shown(tok, id),
                row[i]
            );
        }
    }
    s
}

#[derive(clap::Args)]
pub struct GenerateArgs {
    /// config.json + safetensors, or a .gguf file.
    model_dir: PathBuf,
    /// Comma-separated token ids.
    #[arg(long, conflicts_with = "prompt", required_unless_present = "prompt")]
    ids: Option<String>,
    /// Text, tokenised with a GGUF file's own tokenizer, MODEL_DIR/tokenizer.json or
    /// else data/qwen.tiktoken.
    #[arg(long)]
    prompt: Option<String>,
    /// Wrap the prompt in the Qwen3 chat template.
    #[arg(long, requires = "prompt")]
    chat: bool,
    /// How many tokens to generate at most.
    #[arg(long)]
    max_new_tokens: usize,
    /// Sample at this temperature instead of taking the argmax.
    #[arg(long)]
    temperature: Option<f32>,
    /// Nucleus: sample among the most likely tokens holding this much probability.
    #[arg(long, default_value_t = 1.0, requires = "temperature")]
    top_p: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0, requires = "temperature")]
    seed: u64,
    /// Cap on thinking tokens (chat models; `<think>` and `</think>` are looked up in
    /// the model's own vocabulary).
    #[arg(long)]
    thinking_budget: Option<usize>,
    /// {"ids": [new token ids], "text": str?} on stdout.
    #[arg(long)]
    json: bool,
    /// Every weight dequantised to f32 and the clear (reference) kernels.
    #[arg(long)]
    reference: bool,
}

pub fn generate(args: GenerateArgs) -> anyhow::Result<()> {
    use qwen3::generate::{Prompt, TextRequest};
    let prompt = match (&args.ids, &args.prompt) {
        (Some(ids), _) => Prompt::Ids(ids),
        (None, Some(text)) => Prompt::Text {
            text,
            chat: args.chat,
        },
        (None, None) => unreachable!("clap requires --ids or --prompt"),
    };
    let request = TextRequest {
        prompt,
        max_new_tokens: args.max_new_tokens,
        sampling: qwen3::Sampling::from_temperature(args.temperature, args.top_p, args.seed),
        thinking_budget: args.thinking_budget,
    };
    let prepared = request.prepare(&args.model_dir)?;
    let out = with_model(&args.model_dir, args.reference, |model| {
        Ok(prepared.run(model)?)
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!("{:?}", out.ids);
        if let Some(text) = &out.text {
            println!("{text}");
        }
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct RouterStatsArgs {
    /// config.json + safetensors, or a .gguf file.
    model_dir: PathBuf,
    /// Comma-separated token ids.
    #[arg(long, conflicts_with = "prompt", required_unless_present = "prompt")]
    ids: Option<String>,
    /// Text instead of ids, tokenised as `generate --prompt` does; the table then shows
    /// each position's token (and --json adds "tokens").
    #[arg(long)]
    prompt: Option<String>,
    /// The tokenizer for --prompt (default: the model's own, MODEL_DIR/tokenizer.json,
    /// else data/qwen.tiktoken).
    #[arg(long, requires = "prompt")]
    vocab: Option<PathBuf>,
    /// The report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn router_stats(args: RouterStatsArgs) -> anyhow::Result<()> {
    let (ids, tok) = match (&args.ids, &args.prompt) {
        (Some(ids), _) => (tokenizer::parse_id_ranges(ids)?, None),
        (None, Some(text)) => {
            let tok = vocab_or_default(args.vocab.as_deref(), Some(&args.model_dir))?;
            (tok.encode(text)?, Some(tok))
        }
        (None, None) => unreachable!("clap requires --ids or --prompt"),
    };
    with_model(&args.model_dir, false, |model| {
        let output = model.logits(&ids)?;
        let report = qwen3::router_report(&model.config, &ids, &output);
        if let (true, Some(tok)) = (args.json, &tok) {
            let tokens = ids
                .iter()
                .map(|&id| tok.decode(&[id]).unwrap_or_default())
                .collect();
            let with_tokens = WithTokens {
                report: &report,
                tokens,
            };
            println!("{}", serde_json::to_string(&with_tokens)?);
        } else if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            let text = tok
                .as_ref()
                .map(|t| move |id: u32| t.decode(&[id]).unwrap_or_default());
            let text = text.as_ref().map(|f| f as &dyn Fn(u32) -> String);
            print!("{}", qwen3::router_text(&report, text));
        }
        Ok(())
    })
}

/// `router-stats --prompt --json`: the report and the prompt's tokens, each decoded alone.
#[derive(serde::Serialize)]
struct WithTokens<'a> {
    #[serde(flatten)]
    report: &'a qwen3::RouterReport,
    tokens: Vec<String>,
}

#[derive(clap::Args)]
pub struct LostInMiddleArgs {
    /// config.json + safetensors (single file or sharded with an index), or a .gguf file.
    model: PathBuf,
    /// Tokenizer (tiktoken file, tokenizer.json or .gguf); default a GGUF MODEL's own,
    /// MODEL/tokenizer.json, else data/qwen.tiktoken.
    #[arg(long)]
    vocab: Option<PathBuf>,
    /// Filler words per document (default: about 10,000 tokens, or as many as the
    /// model's context holds); every word is at least one token, so at most the context
    /// minus --max-new-tokens.
    #[arg(long)]
    words: Option<usize>,
    /// Vaults asked about at each placement; at most 1000.
    #[arg(long, default_value_t = 5)]
    trials: usize,
    /// Plain "document, question, Answer:" prompt instead of the chat template (base models).
    #[arg(long)]
    plain: bool,
    /// Longest answer, in tokens.
    #[arg(long, default_value_t = 16)]
    max_new_tokens: usize,
    /// The report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn lost_in_middle(args: LostInMiddleArgs) -> anyhow::Result<()> {
    use qwen3::lost_in_middle as lim;
    let opts = lim::Options {
        words: args.words,
        trials_per_placement: args.trials,
        chat: !args.plain,
        max_new_tokens: args.max_new_tokens,
    };
    let tok = vocab_or_default(args.vocab.as_deref(), Some(&args.model))?;
    let bar = indicatif::ProgressBar::new(0).with_message("trials");
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} {elapsed}")
            .expect("static template"),
    );
    let report = with_model(&args.model, false, |m| {
        Ok(lim::run(m, &tok, &opts, |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })?)
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", lim::text_report(&report));
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// config.json + safetensors, or a .gguf file.
    model_dir: PathBuf,
    /// Tokens of the prompt whose prefill is timed.
    #[arg(long, default_value_t = 128)]
    prompt_len: usize,
    /// Tokens to generate after the prompt.
    #[arg(long = "gen", default_value_t = 32)]
    gen_tokens: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Repetitions of prefill and decode; the medians are reported; at most 1000.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// The machine probes' buffers, exactly, in MiB (default: 512 MiB or 4× the last-level
    /// cache, whichever is larger, so the read ceiling is memory's rather than a cache's).
    #[arg(long)]
    probe_mb: Option<usize>,
    /// The report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let defaults = bench_lib::BenchOptions::default();
    let opts = bench_lib::BenchOptions {
        prompt_len: args.prompt_len,
        gen_tokens: args.gen_tokens,
        reps: args.reps,
        threads: args.threads.unwrap_or(defaults.threads),
        stream_bytes: args
            .probe_mb
            .map_or(defaults.stream_bytes, |mb| mb.saturating_mul(1 << 20)),
        cover_llc: args.probe_mb.is_none(),
    };
    let report = bench_lib::run(&args.model_dir, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", bench_lib::text_report(&report));
    }
    // After the report, so the figures that disagree are on screen; exit 1 (ours).
    bench_lib::check_ceiling(&report)?;
    Ok(())
}

#[derive(clap::Args)]
pub struct PerplexityArgs {
    /// config.json + safetensors, or a .gguf file.
    model: PathBuf,
    /// The text whose first --tokens tokens are scored (UTF-8).
    #[arg(long)]
    text: PathBuf,
    /// Tokens scored (no BOS added); the text must hold at least this many.
    #[arg(long)]
    tokens: usize,
    /// RoPE scaling applied at inference: none (direct extrapolation), linear (PI), ntk
    /// (static NTK-aware), dynamic (dynamic NTK) or yarn.
    #[arg(long, default_value = "none")]
    rope_scaling: String,
    /// The scaling factor s ≥ 1 (the length ratio the scaling is set for).
    #[arg(long, default_value_t = 1.0)]
    factor: f64,
    /// The report as one JSON object (with every position's loss).
    #[arg(long)]
    json: bool,
}

pub fn perplexity(args: PerplexityArgs) -> anyhow::Result<()> {
    use qwen3::perplexity as ppl;
    let method = ppl::Method::parse(&args.rope_scaling)?;
    let tok = qwen3::generate::model_tokenizer(&args.model)?;
    let bytes = llm_anatomy::error::read_file(&args.text)?;
    let text = String::from_utf8(bytes)
        .map_err(|_| llm_anatomy::Error::Invalid(format!("{}: not UTF-8", args.text.display())))?;
    let mut ids = tok.encode(&text)?;
    if ids.len() < args.tokens.max(2) {
        return Err(llm_anatomy::Error::Invalid(format!(
            "{}: {} tokens, fewer than --tokens {}",
            args.text.display(),
            ids.len(),
            args.tokens.max(2)
        ))
        .into());
    }
    ids.truncate(args.tokens);
    let (config, file) = qwen3::open(&args.model)?;
    let trained = config.max_position_embeddings;
    let config = ppl::scaled_config(config, method, args.factor, ids.len())?;
    let model = qwen3::Model::new(config, &file)?;
    let bar = indicatif::ProgressBar::new(ids.len() as u64).with_message("positions");
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} {elapsed}")
            .expect("static template"),
    );
    let started = std::time::Instant::now();
    let losses = ppl::token_losses(&model, &ids, |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let buckets = ppl::buckets(&losses, trained);
    if args.json {
        let report = serde_json::json!({
            "method": method.name(), "factor": args.factor, "tokens": ids.len(),
            "trained_context": trained, "seconds": seconds,
            "buckets": buckets.iter().map(|b| serde_json::json!({
                "start": b.start, "end": b.end, "mean": b.mean, "stderr": b.stderr,
                "count": b.count})).collect::<Vec<_>>(),
            "losses": losses,
        });
        println!("{report}");
    } else {
        println!(
            "{} ×{} on {} tokens (trained context {trained}), {seconds:.0} s",
            method.name(),
            args.factor,
            ids.len()
        );
        for b in &buckets {
            println!(
                "  [{:>6}, {:>6})  loss {:.4} ± {:.4}  ppl {:>8.2}  ({} positions)",
                b.start,
                b.end,
                b.mean,
                b.stderr,
                b.mean.exp(),
                b.count
            );
        }
    }
    Ok(())
}
