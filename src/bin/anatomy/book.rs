//! The book's numbers without a model: `tour`, `figures`, `params` and `rope`.

use anyhow::Context;
use llm_anatomy::quant::mix::FileType;
use llm_anatomy::{claims, long_context::scaling};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct TourArgs {
    /// One JSON array of {id, section, status, stated, computed, note}.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// The table as Markdown (the book's appendix).
    #[arg(long)]
    markdown: bool,
    /// Do not regenerate figures/.
    #[arg(long)]
    skip_figures: bool,
}

pub fn tour(args: TourArgs) -> anyhow::Result<()> {
    let all = claims::all();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else if args.markdown {
        print!("{}", claims::markdown_table(&all));
    } else {
        print!("{}", claims::text_table(&all));
    }
    if !args.skip_figures {
        let written = llm_anatomy::figures::write_all(std::path::Path::new("figures"))?;
        eprintln!("wrote {} figures into figures/", written.len());
    }
    // The bundled models end to end: the tiny toy-grammar one, then the one trained here
    // (to stderr when stdout is JSON/Markdown).
    let demo =
        llm_anatomy::qwen3::tour_demo()? + "\n" + &llm_anatomy::qwen3::trained::trained_demo()?;
    if args.json || args.markdown {
        eprint!("{demo}");
    } else {
        // The one-line summary comes last, so `tail -n 1` shows it.
        print!("\n{demo}\n{}\n", claims::summary_line(&all));
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct FiguresArgs {
    /// The directory the SVG files go to.
    #[arg(long, default_value = "figures")]
    out: PathBuf,
}

pub fn figures(args: FiguresArgs) -> anyhow::Result<()> {
    for p in llm_anatomy::figures::write_all(&args.out)? {
        println!("{}", p.display());
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct ParamsArgs {
    /// A Hugging Face config.json, or a GGUF file (its metadata).
    config: PathBuf,
    /// The report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Also estimate a llama.cpp GGUF file of the model: its size, and its memory with
    /// the KV cache at the config's context (q4_k_m, q5_k_m, q6_k, q8_0, q4_0, bf16,
    /// and llama.cpp's other file types: f32, f16, q4_1, q5_0, q5_1, q4_k_s, q5_k_s).
    #[arg(long, value_name = "SCHEME", value_parser = parse_quant)]
    quant: Option<FileType>,
}

pub fn params(args: ParamsArgs) -> anyhow::Result<()> {
    use llm_anatomy::params::quant as q;
    use llm_anatomy::params::report;
    let config = &args.config;
    let what = config.display().to_string();
    // A GGUF file's metadata, read as the engine reads it, as the config.json it implies.
    let json = if llm_anatomy::qwen3::is_gguf(config) {
        let gguf = llm_anatomy::gguf::Gguf::open(config)?;
        let cfg = llm_anatomy::qwen3::gguf_config::config_from_gguf(&gguf)?;
        llm_anatomy::train::params::config_json(&cfg)?
    } else {
        llm_anatomy::error::read_json(config)?
    };
    let report = report::config_report_json(&json, &what)?;
    let estimate = args
        .quant
        .map(|s| q::estimate_json(&json, &what, s))
        .transpose()?;
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        if let (Some(e), Some(map)) = (&estimate, value.as_object_mut()) {
            map.insert("quant".into(), serde_json::to_value(e)?);
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", report::config_text_report(&report));
        if let Some(e) = &estimate {
            print!("{}", q::text_block(e));
        }
    }
    Ok(())
}

/// `--quant`: one of llama.cpp's file types, by the name `llama-quantize` takes.
fn parse_quant(s: &str) -> Result<FileType, String> {
    FileType::from_name(s).ok_or_else(|| format!("unknown scheme {s:?}; one of {}", file_types()))
}

/// The names of llama.cpp's file types we write, comma-separated.
pub fn file_types() -> String {
    let names: Vec<&str> = llm_anatomy::quant::mix::ALL_FILE_TYPES
        .iter()
        .map(|t| t.name())
        .collect();
    names.join(", ")
}

#[derive(clap::Args)]
pub struct RopeArgs {
    /// The attention head's dimension (an even number).
    #[arg(long)]
    head_dim: usize,
    /// The RoPE base (rope_theta).
    #[arg(long)]
    theta: f64,
    /// A Hugging Face rope_scaling / rope_parameters object, e.g.
    /// '{"rope_type":"yarn","factor":4,"original_max_position_embeddings":32768}'.
    #[arg(long)]
    scaling: Option<String>,
    /// The config's max_position_embeddings (dynamic NTK, LongRoPE).
    #[arg(long)]
    max_position_embeddings: Option<usize>,
    /// The current sequence length (dynamic NTK, LongRoPE).
    #[arg(long)]
    seq_len: Option<usize>,
    /// {"inv_freq": [...], "attention_factor": f64} on stdout.
    #[arg(long)]
    json: bool,
}

pub fn rope(args: RopeArgs) -> anyhow::Result<()> {
    let parsed = args
        .scaling
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
        args.head_dim,
        args.theta,
        parsed.as_ref(),
        args.max_position_embeddings,
        "anatomy rope",
    )?;
    let init = cfg
        .init(args.seq_len)
        .context("computing RoPE frequencies")?;
    if args.json {
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
    Ok(())
}
