//! `anatomy` — the command line. It only parses arguments, calls one library function and
//! prints; the forms are fixed by shared/cli.md. Bad input exits with code 2, internal
//! failures with 1.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[path = "anatomy/book.rs"]
mod book;
#[path = "anatomy/experiments.rs"]
mod experiments;
#[path = "anatomy/grad.rs"]
mod grad;
#[path = "anatomy/model.rs"]
mod model;
#[path = "anatomy/quantize.rs"]
mod quantize;
#[path = "anatomy/serve.rs"]
mod serve;
#[path = "anatomy/text.rs"]
mod text;
#[path = "anatomy/train.rs"]
mod train;

#[derive(Parser)]
#[command(
    name = "anatomy",
    version,
    about = "Take a modern LLM apart: RoPE, length extrapolation, claims of the source texts."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compute every claim of the source texts, regenerate the figures, show the table.
    Tour(book::TourArgs),
    /// Regenerate every figure as SVG.
    Figures(book::FiguresArgs),
    /// Parameters, memory, KV cache and FLOPs of a Hugging Face config.json (Qwen3,
    /// Qwen3-MoE, Mixtral, OLMoE, DeepSeek-V3; also DeepSeek-V2, Qwen2, Llama, Mistral).
    Params(book::ParamsArgs),
    /// Token ids of TEXT with a Qwen vocabulary (tiktoken file or tokenizer.json);
    /// special tokens such as <|im_start|> are recognised.
    Tokenize(text::TokenizeArgs),
    /// The text of comma-separated token ids (invalid UTF-8 shown as U+FFFD).
    Detokenize(text::DetokenizeArgs),
    /// Glitch-token screens: the literal scan and the text's id table over the vocabulary;
    /// with --model, embedding-norm screening and the unembedding indicator.
    Glitch(text::GlitchArgs),
    /// RoPE inverse frequencies and attention factor, as transformers computes them.
    Rope(book::RopeArgs),
    /// Logits of every position of a token-id prompt, written as safetensors
    /// (tensor "logits", F32, [seq, vocab]).
    Logits(model::LogitsArgs),
    /// Loss and every parameter's gradient for `model(input_ids=ids, labels=ids)`, as
    /// safetensors ("loss", "ce_loss", "aux_loss" for MoE, one tensor per parameter).
    Grad(grad::GradArgs),
    /// Continue a prompt: greedy, or sampled with --temperature / --top-p / --seed.
    Generate(model::GenerateArgs),
    /// Render a conversation with the Qwen3 chat template, exactly as jinja2 does.
    ChatTemplate(text::ChatTemplateArgs),
    /// Per MoE layer, per position: the experts the router selected and their weights.
    RouterStats(model::RouterStatsArgs),
    /// S1 exercise 2, lost in the middle: accuracy with the key sentence at the start,
    /// middle and end of a long document, answered greedily by the model.
    LostInMiddle(model::LostInMiddleArgs),
    /// Per-token loss on a long text by position bucket, with a RoPE scaling applied at
    /// inference (direct, PI, NTK-aware, dynamic NTK, YaRN).
    Perplexity(model::PerplexityArgs),
    /// Memory bandwidth and FMA peak of this machine, then prefill and decode rates on a
    /// checkpoint and the fraction of each ceiling they reach.
    Bench(model::BenchArgs),
    /// Train a Qwen3-MoE from scratch on a text corpus into a Hugging Face checkpoint.
    Train(Box<train::TrainArgs>),
    /// Run chapter 13's training experiments (train.collapse, …, or "all").
    Experiments(Box<experiments::ExperimentsArgs>),
    /// Stream a Hugging Face checkpoint into a GGUF file llama.cpp loads, quantised with
    /// llama.cpp's per-tensor type mix for the file type.
    Quantize(quantize::QuantizeArgs),
    /// Serve MODEL over an OpenAI-compatible HTTP API with a chat page at `/`.
    Serve(serve::ServeArgs),
}

/// Errors from the library are the user's input unless the library says otherwise.
fn exit_code(err: &anyhow::Error) -> u8 {
    match err.downcast_ref::<llm_anatomy::Error>() {
        Some(e) if !e.is_bad_input() => 1,
        Some(_) => 2,
        None => 1,
    }
}

/// The error and its causes, each once: library errors already quote their source in
/// their own message, so a cause whose text the previous message ends with is skipped.
fn describe(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("anatomy: {}", describe(&err));
            ExitCode::from(exit_code(&err))
        }
    }
}

/// Lets `anatomy … | head` end quietly: Rust ignores SIGPIPE, so a closed pipe would make
/// `println!` panic; with the default disposition the process just ends, like any Unix tool.
#[cfg(unix)]
fn restore_sigpipe() {
    // SAFETY: `signal` with SIG_DFL installs no Rust handler and touches no Rust state; it is
    // called first thing in main, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn restore_sigpipe() {}

/// Each subcommand is one function of its module.
fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Tour(args) => book::tour(args),
        Command::Figures(args) => book::figures(args),
        Command::Params(args) => book::params(args),
        Command::Tokenize(args) => text::tokenize(args),
        Command::Detokenize(args) => text::detokenize(args),
        Command::Glitch(args) => text::glitch(args),
        Command::Rope(args) => book::rope(args),
        Command::Logits(args) => model::logits(args),
        Command::Grad(args) => grad::run(args),
        Command::Generate(args) => model::generate(args),
        Command::ChatTemplate(args) => text::chat_template(args),
        Command::RouterStats(args) => model::router_stats(args),
        Command::LostInMiddle(args) => model::lost_in_middle(args),
        Command::Perplexity(args) => model::perplexity(args),
        Command::Bench(args) => model::bench(args),
        Command::Train(args) => train::run(*args),
        Command::Experiments(args) => experiments::run(*args),
        Command::Quantize(args) => quantize::run(args),
        Command::Serve(args) => serve::run(args),
    }
}
