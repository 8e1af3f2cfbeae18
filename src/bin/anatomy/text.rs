//! Text and token ids: `tokenize`, `detokenize`, `glitch` and `chat-template`. Without
//! `--vocab` the vocabulary is the one `generate` would use: a GGUF model's own, a model
//! directory's tokenizer.json, else Qwen's (data/qwen.tiktoken).

use crate::model::with_model;
use llm_anatomy::tokenizer::{self, Tokenizer};
use llm_anatomy::{qwen3, tokenizer::glitch};
use std::path::{Path, PathBuf};

/// `--vocab` if given, else `model`'s tokenizer as `generate` finds it, else Qwen's.
pub fn vocab_or_default(vocab: Option<&Path>, model: Option<&Path>) -> anyhow::Result<Tokenizer> {
    Ok(match (vocab, model) {
        (Some(file), _) => Tokenizer::from_file(file)?,
        (None, Some(m)) => qwen3::generate::model_tokenizer(m)?,
        (None, None) => Tokenizer::qwen()?,
    })
}

#[derive(clap::Args)]
pub struct TokenizeArgs {
    /// Tiktoken file, tokenizer.json or .gguf (default: Qwen's, data/qwen.tiktoken).
    #[arg(long)]
    vocab: Option<PathBuf>,
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
    /// The text to split into tokens.
    text: String,
}

pub fn tokenize(args: TokenizeArgs) -> anyhow::Result<()> {
    let mut tok = vocab_or_default(args.vocab.as_deref(), None)?;
    tok.nfc = (tok.nfc || args.nfc) && !args.no_nfc;
    let mut ids = tok.encode(&args.text)?;
    let lost = tok.bytes_without_token(&args.text);
    if !lost.is_empty() {
        let bytes: Vec<String> = lost.iter().map(|b| format!("0x{b:02x}")).collect();
        let (what, them) = if lost.len() == 1 {
            ("byte", "it is")
        } else {
            ("bytes", "they are")
        };
        eprintln!(
            "note: {} has no token for {what} {} of the text; {them} left out of the ids, as llama.cpp leaves them out",
            tok.name,
            bytes.join(", ")
        );
    }
    // A GGUF file that says `add_bos_token` gets its BOS first, as llama.cpp tokenizes.
    if let Some(file) = args.vocab.as_deref().filter(|p| qwen3::is_gguf(p)) {
        let vocab = tokenizer::gguf_vocab::open(file)?;
        if let Some(bos) = vocab.bos.filter(|_| vocab.add_bos) {
            ids.insert(0, bos);
        }
    }
    if args.json {
        println!("{}", serde_json::json!({ "ids": ids }));
    } else {
        print!("{}", tok.id_table(&ids)?);
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct DetokenizeArgs {
    /// Tiktoken file, tokenizer.json or .gguf (default: Qwen's, data/qwen.tiktoken).
    #[arg(long)]
    vocab: Option<PathBuf>,
    /// {"text": str, "valid_utf8": bool} on stdout.
    #[arg(long)]
    json: bool,
    /// Comma-separated token ids or ranges, e.g. 1,2,5-9.
    ids: String,
}

pub fn detokenize(args: DetokenizeArgs) -> anyhow::Result<()> {
    let tok = vocab_or_default(args.vocab.as_deref(), None)?;
    let ids = tokenizer::parse_id_ranges(&args.ids)?;
    let decoded = tok.decode_checked(&ids)?;
    if args.json {
        println!("{}", serde_json::to_string(&decoded)?);
    } else {
        println!("{}", decoded.text);
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct GlitchArgs {
    /// Tiktoken file, tokenizer.json or .gguf; default --model's own (a GGUF file's, a
    /// directory's tokenizer.json), else Qwen's (data/qwen.tiktoken).
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
    /// The report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn glitch(args: GlitchArgs) -> anyhow::Result<()> {
    use llm_anatomy::limits::{REPEAT_CANDIDATES, check};
    check("glitch", "--repeat", args.repeat as u128, REPEAT_CANDIDATES)
        .map_err(llm_anatomy::Error::from)?;
    let model = args.model.as_deref();
    let tok = vocab_or_default(args.vocab.as_deref(), model)?;
    let unused = args
        .unused
        .as_deref()
        .map(tokenizer::parse_id_ranges)
        .transpose()?;
    let mut report = qwen3::glitch_report(&tok, model, args.top_k, unused)?;
    if let Some(dir) = model.filter(|_| args.repeat > 0) {
        let tested = with_model(dir, false, |m| {
            Ok(qwen3::generate::glitch_repetition_test(
                m,
                &tok,
                &report,
                args.repeat,
            )?)
        })?;
        report.repetition = Some(tested);
    }
    if args.json {
        // Through a JSON value, whose keys come out sorted.
        println!("{}", serde_json::to_value(&report)?);
    } else {
        print!("{}", glitch::text_report(&report, args.show));
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct ChatTemplateArgs {
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
    /// A .gguf file whose own chat template renders the messages (Qwen files: the
    /// hand-written Qwen3 template; omitted: the Qwen3 template).
    #[arg(long)]
    model: Option<PathBuf>,
}

pub fn chat_template(args: ChatTemplateArgs) -> anyhow::Result<()> {
    let conversation = llm_anatomy::chat::template::load_conversation(&args.messages)?;
    let opts = llm_anatomy::chat::ChatOptions {
        add_generation_prompt: args.add_generation_prompt,
        enable_thinking: args.enable_thinking,
    };
    match args.model {
        Some(file) => {
            let (_, text) = qwen3::generate::gguf_chat(&file, &conversation.messages, &opts)?;
            print!("{text}");
        }
        None => print!("{}", conversation.render(&opts)?),
    }
    Ok(())
}
