//! `anatomy quantize`: a Hugging Face checkpoint streamed into a GGUF file, with a progress
//! bar; what the file type could not give every tensor, and the vocabulary when it was not
//! given, are said on stderr.

use llm_anatomy::quant::mix::FileType;
use llm_anatomy::qwen3::to_gguf;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct QuantizeArgs {
    /// config.json + safetensors (single file or sharded with an index).
    model_dir: PathBuf,
    /// f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k.
    #[arg(long = "type", value_name = "TYPE", value_parser = parse_file_type)]
    ftype: FileType,
    /// The GGUF file to write.
    #[arg(long)]
    out: PathBuf,
    /// Tokenizer to include (tiktoken file or tokenizer.json); default
    /// MODEL_DIR/tokenizer.json if present, else Qwen's (data/qwen.tiktoken) when the
    /// model's vocab_size has room for it, else none (llama.cpp's "none" vocabulary).
    #[arg(long)]
    vocab: Option<PathBuf>,
}

/// `--type`: one of llama.cpp's file types, by the name `llama-quantize` takes.
fn parse_file_type(s: &str) -> Result<FileType, String> {
    FileType::from_name(s)
        .ok_or_else(|| format!("not a file type; one of {}", crate::book::file_types()))
}

pub fn run(args: QuantizeArgs) -> anyhow::Result<()> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {percent:>3}% {elapsed} {msg}")
            .expect("static template"),
    );
    let summary = to_gguf::quantize_checkpoint(
        &args.model_dir,
        &args.out,
        args.ftype,
        args.vocab.as_deref(),
        &mut |done, total, tensor| {
            bar.set_length(total);
            bar.set_position(done);
            bar.set_message(tensor.to_string());
        },
    )?;
    bar.finish_and_clear();
    for note in [
        to_gguf::fallback_note(&summary),
        to_gguf::vocab_note(&summary),
    ]
    .into_iter()
    .flatten()
    {
        eprint!("{note}");
        if !note.ends_with('\n') {
            eprintln!();
        }
    }
    print!("{}", to_gguf::text_summary(&summary, &args.out));
    Ok(())
}
