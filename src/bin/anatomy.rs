//! `anatomy` — the command line. It only parses arguments, calls one library function and
//! prints; the forms are fixed by shared/cli.md. Bad input exits with code 2, internal
//! failures with 1.

use anyhow::Context;
use clap::{Parser, Subcommand};
use llm_anatomy::{claims, figures, long_context::scaling, qwen3, tokenizer};
use std::path::PathBuf;
use std::process::ExitCode;

#[path = "anatomy/experiments.rs"]
mod experiments;
#[path = "anatomy/grad.rs"]
mod grad;
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
    Tour {
        /// One JSON array of {id, section, status, stated, computed, note}.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// The table as Markdown (the book's appendix).
        #[arg(long)]
        markdown: bool,
        /// Do not regenerate figures/.
        #[arg(long)]
        skip_figures: bool,
    },
    /// Regenerate every figure as SVG.
    Figures {
        #[arg(long, default_value = "figures")]
        out: PathBuf,
    },
    /// Parameters, memory, KV cache and FLOPs of a Hugging Face config.json (Qwen3,
    /// Qwen3-MoE, Mixtral, OLMoE, DeepSeek-V3; also DeepSeek-V2, Qwen2, Llama, Mistral).
    Params {
        config: PathBuf,
        #[arg(long)]
        json: bool,
        /// Also estimate a llama.cpp GGUF file of the model: its size, and its memory with
        /// the KV cache at the config's context (q4_k_m, q5_k_m, q6_k, q8_0, q4_0, bf16,
        /// and llama.cpp's other file types: f32, f16, q4_1, q5_0, q5_1, q4_k_s, q5_k_s).
        #[arg(long, value_name = "SCHEME", value_parser = parse_quant)]
        quant: Option<llm_anatomy::quant::mix::FileType>,
    },
    /// Token ids of TEXT with a Qwen vocabulary (tiktoken file or tokenizer.json);
    /// special tokens such as <|im_start|> are recognised.
    Tokenize {
        #[arg(long)]
        vocab: PathBuf,
        /// {"ids": [...]} on stdout.
        #[arg(long)]
        json: bool,
        /// Put text in Unicode NFC first even when the vocabulary has no normaliser (a
        /// tiktoken file and Qwen's tokenizer.json already do).
        #[arg(long, conflicts_with = "no_nfc")]
        nfc: bool,
        /// Skip NFC: tiktoken's raw ids, which differ from Qwen's on text not in NFC.
        #[arg(long)]
        no_nfc: bool,
        text: String,
    },
    /// The text of comma-separated token ids (invalid UTF-8 shown as U+FFFD).
    Detokenize {
        #[arg(long)]
        vocab: PathBuf,
        #[arg(long)]
        json: bool,
        ids: String,
    },
    /// Glitch-token screens: the literal scan and the text's id table over the vocabulary;
    /// with --model, embedding-norm screening and the unembedding indicator.
    Glitch {
        /// Tiktoken file, tokenizer.json or .gguf; optional when --model is a GGUF file
        /// (its own tokenizer is used).
        #[arg(long)]
        vocab: Option<PathBuf>,
        /// A safetensors checkpoint directory (model.embed_tokens.weight, lm_head.weight)
        /// or a .gguf file (token_embd.weight, output.weight).
        #[arg(long)]
        model: Option<PathBuf>,
        /// How many smallest-norm rows to keep (the text uses 10000).
        #[arg(long, default_value_t = 10_000)]
        top_k: usize,
        /// Ids known to be unused, for the unembedding indicator, e.g. 151665-152063
        /// (default: the rows past the vocabulary).
        #[arg(long)]
        unused: Option<String>,
        /// Rows to print per list in the text output.
        #[arg(long, default_value_t = 20)]
        show: usize,
        /// With --model (a Qwen3 checkpoint): run the "please repeat" test on this many
        /// candidates (multi-character Chinese ones first, then the smallest norms), greedy,
        /// 16 new tokens each; at most 10000.
        #[arg(long, default_value_t = 0)]
        repeat: usize,
        #[arg(long)]
        json: bool,
    },
    /// RoPE inverse frequencies and attention factor, as transformers computes them.
    Rope {
        #[arg(long)]
        head_dim: usize,
        /// The RoPE base (rope_theta).
        #[arg(long)]
        theta: f64,
        /// A Hugging Face rope_scaling / rope_parameters object, e.g.
        /// '{"rope_type":"yarn","factor":4,"original_max_position_embeddings":32768}'.
        #[arg(long)]
        scaling: Option<String>,
        #[arg(long)]
        max_position_embeddings: Option<usize>,
        /// The current sequence length (dynamic NTK, LongRoPE).
        #[arg(long)]
        seq_len: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// Logits of every position of a token-id prompt, written as safetensors
    /// (tensor "logits", F32, [seq, vocab]).
    Logits {
        /// config.json + safetensors (single file or sharded with an index), or a .gguf file.
        model_dir: PathBuf,
        /// Comma-separated token ids, e.g. 1,2,3.
        #[arg(long)]
        ids: String,
        #[arg(long)]
        out: PathBuf,
        /// Every weight dequantised to f32 and the clear (reference) kernels.
        #[arg(long)]
        reference: bool,
    },
    /// Loss and every parameter's gradient for `model(input_ids=ids, labels=ids)`, as
    /// safetensors ("loss", "ce_loss", "aux_loss" for MoE, one tensor per parameter).
    Grad {
        /// config.json + safetensors (single file or sharded with an index).
        model_dir: PathBuf,
        /// Comma-separated token ids (at least 2).
        #[arg(long)]
        ids: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// Continue a prompt: greedy, or sampled with --temperature / --top-p / --seed.
    Generate {
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
        #[arg(long)]
        max_new_tokens: usize,
        /// Sample at this temperature instead of taking the argmax.
        #[arg(long)]
        temperature: Option<f32>,
        /// Nucleus: sample among the most likely tokens holding this much probability.
        #[arg(long, default_value_t = 1.0, requires = "temperature")]
        top_p: f32,
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
    },
    /// Render a conversation with the Qwen3 chat template, exactly as jinja2 does.
    ChatTemplate {
        /// A JSON array of {"role", "content"[, "reasoning_content", "tool_calls"]}, or an
        /// object {"messages": [...], "tools": [...]}.
        #[arg(long)]
        messages: PathBuf,
        /// End with the header of a new assistant turn.
        #[arg(long)]
        add_generation_prompt: bool,
        /// false pre-fills an empty think block; omitted = not passed to the template.
        #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
        enable_thinking: Option<bool>,
    },
    /// Per MoE layer, per position: the experts the router selected and their weights.
    RouterStats {
        /// config.json + safetensors, or a .gguf file.
        model_dir: PathBuf,
        #[arg(long)]
        ids: String,
        #[arg(long)]
        json: bool,
    },
    /// S1 exercise 2, lost in the middle: accuracy with the key sentence at the start,
    /// middle and end of a long document, answered greedily by the model.
    LostInMiddle {
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
        #[arg(long)]
        json: bool,
    },
    /// Memory bandwidth and FMA peak of this machine, then prefill and decode rates on a
    /// checkpoint and the fraction of each ceiling they reach.
    Bench {
        /// config.json + safetensors, or a .gguf file.
        model_dir: PathBuf,
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
        #[arg(long)]
        json: bool,
    },
    /// Train a Qwen3-MoE from scratch on a text corpus into a Hugging Face checkpoint.
    Train(Box<train::TrainArgs>),
    /// Run chapter 13's training experiments (train.collapse, …, or "all").
    Experiments(Box<experiments::ExperimentsArgs>),
    /// Stream a Hugging Face checkpoint into a GGUF file llama.cpp loads, quantised with
    /// llama.cpp's per-tensor type mix for the file type.
    Quantize {
        /// config.json + safetensors (single file or sharded with an index).
        model_dir: PathBuf,
        /// f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k.
        #[arg(long = "type")]
        ftype: String,
        #[arg(long)]
        out: PathBuf,
        /// Tokenizer to include (tiktoken file or tokenizer.json); default
        /// MODEL_DIR/tokenizer.json if present, else none (llama.cpp's "none" vocabulary).
        #[arg(long)]
        vocab: Option<PathBuf>,
    },
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

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Tour {
            json,
            markdown,
            skip_figures,
        } => {
            let all = claims::all();
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else if markdown {
                print!("{}", claims::markdown_table(&all));
            } else {
                print!("{}", claims::text_table(&all));
            }
            if !skip_figures {
                let written = figures::write_all(std::path::Path::new("figures"))?;
                eprintln!("wrote {} figures into figures/", written.len());
            }
            // The bundled models end to end: the tiny toy-grammar one, then the one trained here
            // (to stderr when stdout is JSON/Markdown).
            let demo = qwen3::tour_demo()? + "\n" + &qwen3::trained::trained_demo()?;
            if json || markdown {
                eprint!("{demo}");
            } else {
                // The one-line summary comes last, so `tail -n 1` shows it.
                print!("\n{demo}\n{}\n", claims::summary_line(&all));
            }
        }
        Command::Figures { out } => {
            let written = figures::write_all(&out)?;
            for p in written {
                println!("{}", p.display());
            }
        }
        Command::Params {
            config,
            json,
            quant,
        } => {
            use llm_anatomy::params::quant as q;
            let report = llm_anatomy::params::report::config_report_file(&config)?;
            let estimate = quant.map(|s| q::estimate_file(&config, s)).transpose()?;
            if json {
                let mut value = serde_json::to_value(&report)?;
                if let (Some(e), Some(map)) = (&estimate, value.as_object_mut()) {
                    map.insert("quant".into(), serde_json::to_value(e)?);
                }
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                print!(
                    "{}",
                    llm_anatomy::params::report::config_text_report(&report)
                );
                if let Some(e) = &estimate {
                    print!("{}", q::text_block(e));
                }
            }
        }
        Command::Tokenize {
            vocab,
            json,
            nfc,
            no_nfc,
            text,
        } => {
            let mut tok = tokenizer::Tokenizer::from_file(&vocab)?;
            tok.nfc = (tok.nfc || nfc) && !no_nfc;
            let ids = tok.encode(&text)?;
            if json {
                println!("{}", serde_json::json!({ "ids": ids }));
            } else {
                print!("{}", tok.id_table(&ids)?);
            }
        }
        Command::Detokenize { vocab, json, ids } => {
            let tok = tokenizer::Tokenizer::from_file(&vocab)?;
            let ids = tokenizer::parse_id_ranges(&ids)?;
            let decoded = tok.decode_checked(&ids)?;
            if json {
                println!("{}", serde_json::to_string(&decoded)?);
            } else {
                println!("{}", decoded.text);
            }
        }
        Command::Glitch {
            vocab,
            model,
            top_k,
            unused,
            show,
            repeat,
            json,
        } => {
            use llm_anatomy::limits::{REPEAT_CANDIDATES, check};
            check("glitch", "--repeat", repeat as u128, REPEAT_CANDIDATES)
                .map_err(llm_anatomy::Error::from)?;
            let tok = qwen3::vocab_or_model_tokenizer(vocab.as_deref(), model.as_deref())?;
            let unused = unused
                .as_deref()
                .map(tokenizer::parse_id_ranges)
                .transpose()?;
            let mut report = qwen3::glitch_report(&tok, model.as_deref(), top_k, unused)?;
            if let Some(dir) = model.as_deref().filter(|_| repeat > 0) {
                let tested = with_model(dir, false, |m| {
                    Ok(qwen3::generate::glitch_repetition_test(
                        m, &tok, &report, repeat,
                    )?)
                })?;
                report.repetition = Some(tested);
            }
            if json {
                // Through a JSON value, whose keys come out sorted.
                println!("{}", serde_json::to_value(&report)?);
            } else {
                print!("{}", tokenizer::glitch::text_report(&report, show));
            }
        }
        Command::Logits {
            model_dir,
            ids,
            out,
            reference,
        } => {
            let ids = tokenizer::parse_id_ranges(&ids)?;
            with_model(&model_dir, reference, |model| {
                let output = model.logits(&ids)?;
                qwen3::save_logits(&out, &output, model.config.vocab_size)?;
                eprintln!(
                    "wrote logits [{}, {}] to {}",
                    output.rows,
                    model.config.vocab_size,
                    out.display()
                );
                Ok(())
            })?;
        }
        Command::Grad {
            model_dir,
            ids,
            out,
        } => grad::run(&model_dir, &ids, &out)?,
        Command::Generate {
            model_dir,
            ids,
            prompt,
            chat,
            max_new_tokens,
            temperature,
            top_p,
            seed,
            thinking_budget,
            json,
            reference,
        } => {
            let prompt = match (&ids, &prompt) {
                (Some(ids), _) => qwen3::generate::Prompt::Ids(ids),
                (None, Some(text)) => qwen3::generate::Prompt::Text { text, chat },
                (None, None) => unreachable!("clap requires --ids or --prompt"),
            };
            let request = qwen3::generate::TextRequest {
                prompt,
                max_new_tokens,
                sampling: qwen3::Sampling::from_temperature(temperature, top_p, seed),
                thinking_budget,
            };
            let prepared = request.prepare(&model_dir)?;
            let out = with_model(&model_dir, reference, |model| Ok(prepared.run(model)?))?;
            if json {
                println!("{}", serde_json::to_string(&out)?);
            } else {
                println!("{:?}", out.ids);
                if let Some(text) = &out.text {
                    println!("{text}");
                }
            }
        }
        Command::ChatTemplate {
            messages,
            add_generation_prompt,
            enable_thinking,
        } => {
            let conversation = llm_anatomy::chat::template::load_conversation(&messages)?;
            let opts = llm_anatomy::chat::ChatOptions {
                add_generation_prompt,
                enable_thinking,
            };
            print!("{}", conversation.render(&opts)?);
        }
        Command::RouterStats {
            model_dir,
            ids,
            json,
        } => {
            let ids = tokenizer::parse_id_ranges(&ids)?;
            with_model(&model_dir, false, |model| {
                let output = model.logits(&ids)?;
                let report = qwen3::router_report(&model.config, &ids, &output);
                if json {
                    println!("{}", serde_json::to_string(&report)?);
                } else {
                    print!("{}", qwen3::router_text(&report, None));
                }
                Ok(())
            })?;
        }
        Command::Rope {
            head_dim,
            theta,
            scaling: scaling_json,
            max_position_embeddings,
            seq_len,
            json,
        } => {
            let parsed = scaling_json
                .as_deref()
                .map(|s| {
                    serde_json::from_str::<serde_json::Value>(s).map_err(|source| {
                        llm_anatomy::Error::Json {
                            what: "--scaling".into(),
                            source,
                        }
                    })
                })
                .transpose()?;
            let cfg = scaling::RopeConfig::new(
                head_dim,
                theta,
                parsed.as_ref(),
                max_position_embeddings,
                "anatomy rope",
            )?;
            let init = cfg.init(seq_len).context("computing RoPE frequencies")?;
            if json {
                let out = serde_json::json!({"inv_freq": init.inv_freq, "attention_factor": init.attention_factor});
                println!("{out}");
            } else {
                println!("attention_factor {}", init.attention_factor);
                println!("{:>5} {:>14} {:>16}", "plane", "inv_freq", "wavelength");
                for (i, f) in init.inv_freq.iter().enumerate() {
                    println!(
                        "{i:>5} {f:>14.6e} {:>16.1}",
                        llm_anatomy::position::rope::wavelength(*f)
                    );
                }
            }
        }
        Command::LostInMiddle {
            model,
            vocab,
            words,
            trials,
            plain,
            max_new_tokens,
            json,
        } => {
            let opts = qwen3::lost_in_middle::Options {
                words,
                trials_per_placement: trials,
                chat: !plain,
                max_new_tokens,
            };
            let tok = qwen3::lost_in_middle::tokenizer(&model, vocab.as_deref())?;
            let bar = indicatif::ProgressBar::new(0).with_message("trials");
            bar.set_style(
                indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} {elapsed}")
                    .expect("static template"),
            );
            let report = with_model(&model, false, |m| {
                Ok(qwen3::lost_in_middle::run(
                    m,
                    &tok,
                    &opts,
                    |done, total| {
                        bar.set_length(total as u64);
                        bar.set_position(done as u64);
                    },
                )?)
            })?;
            bar.finish_and_clear();
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", qwen3::lost_in_middle::text_report(&report));
            }
        }
        Command::Bench {
            model_dir,
            prompt_len,
            gen_tokens,
            threads,
            reps,
            json,
        } => {
            let defaults = llm_anatomy::bench::BenchOptions::default();
            let opts = llm_anatomy::bench::BenchOptions {
                prompt_len,
                gen_tokens,
                reps,
                threads: threads.unwrap_or(defaults.threads),
                ..defaults
            };
            let report = llm_anatomy::bench::run(&model_dir, &opts)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", llm_anatomy::bench::text_report(&report));
            }
            // After the report, so the figures that disagree are on screen; exit 1 (ours).
            llm_anatomy::bench::check_ceiling(&report)?;
        }
        Command::Train(args) => train::run(*args)?,
        Command::Experiments(args) => experiments::run(*args)?,
        Command::Quantize {
            model_dir,
            ftype,
            out,
            vocab,
        } => {
            use llm_anatomy::quant::mix::{ALL_FILE_TYPES, FileType};
            let ftype = FileType::from_name(&ftype).ok_or_else(|| {
                let names: Vec<&str> = ALL_FILE_TYPES.iter().map(|t| t.name()).collect();
                llm_anatomy::Error::Invalid(format!(
                    "--type {ftype:?}: not a file type; one of {}",
                    names.join(", ")
                ))
            })?;
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:30} {percent:>3}% {elapsed} {msg}")
                    .expect("static template"),
            );
            let summary = qwen3::to_gguf::quantize_checkpoint(
                &model_dir,
                &out,
                ftype,
                vocab.as_deref(),
                &mut |done, total, tensor| {
                    bar.set_length(total);
                    bar.set_position(done);
                    bar.set_message(tensor.to_string());
                },
            )?;
            bar.finish_and_clear();
            print!("{}", qwen3::to_gguf::text_summary(&summary, &out));
        }
    }
    Ok(())
}

/// Opens MODEL (config.json + safetensors, or a .gguf file), views its weights with a
/// progress bar on a terminal, and runs `f` on the model; with `reference`, on every weight
/// widened to f32 and with the clear kernels.
fn with_model<T>(
    dir: &std::path::Path,
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

/// `--quant`: one of llama.cpp's file types, by the name `llama-quantize` takes.
fn parse_quant(s: &str) -> Result<llm_anatomy::quant::mix::FileType, String> {
    use llm_anatomy::quant::mix::{ALL_FILE_TYPES, FileType};
    FileType::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = ALL_FILE_TYPES.iter().map(|q| q.name()).collect();
        format!("unknown scheme {s:?}; one of {}", names.join(", "))
    })
}
