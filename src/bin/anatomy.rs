//! `anatomy` — the command line. It only parses arguments, calls one library function and
//! prints; the forms are fixed by shared/cli.md. Bad input exits with code 2, internal
//! failures with 1.

use anyhow::Context;
use clap::{Parser, Subcommand};
use llm_anatomy::{claims, figures, long_context::scaling};
use std::path::PathBuf;
use std::process::ExitCode;

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
}

/// Errors from the library are the user's input unless the library says otherwise.
fn exit_code(err: &anyhow::Error) -> u8 {
    match err.downcast_ref::<llm_anatomy::Error>() {
        Some(e) if !e.is_bad_input() => 1,
        Some(_) => 2,
        None => 1,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("anatomy: {err:#}");
            ExitCode::from(exit_code(&err))
        }
    }
}

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
        }
        Command::Figures { out } => {
            let written = figures::write_all(&out)?;
            for p in written {
                println!("{}", p.display());
            }
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
                "--scaling",
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
    }
    Ok(())
}
