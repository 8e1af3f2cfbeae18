//! How a request's text becomes the served model's ids, as `anatomy generate` makes them:
//! a Hugging Face directory through its tokenizer and the Qwen3 chat template; a GGUF file
//! through its own vocabulary (BOS first when the file's `add_bos_token` says so, control
//! tokens parsed, as llama.cpp tokenizes a prompt) and, for chat, the Qwen3 template for
//! Qwen files or else the template the file carries. A file without one (a base model)
//! serves `/v1/completions` only.

use crate::chat::{ChatOptions, Conversation};
use crate::error::Result;
use crate::tokenizer::Tokenizer;
use crate::tokenizer::gguf_vocab::GgufVocab;
use std::path::{Path, PathBuf};

/// The served model's tokenizer and chat template.
pub enum PromptFormat {
    /// A directory, or any model given `--vocab`: the tokenizer's plain `encode` and the
    /// Qwen3 template.
    Plain(Tokenizer),
    /// A GGUF file's own vocabulary.
    Gguf {
        file: PathBuf,
        vocab: GgufVocab,
        /// `general.architecture` starts with `qwen`: chat goes through the Qwen3 template.
        qwen: bool,
    },
}

impl PromptFormat {
    /// The format for MODEL, or for the tokenizer file `vocab` when given.
    pub fn open(model: &Path, vocab: Option<&Path>) -> Result<PromptFormat> {
        if let Some(v) = vocab {
            return Ok(PromptFormat::Plain(Tokenizer::from_file(v)?));
        }
        if !crate::qwen3::is_gguf(model) {
            return Ok(PromptFormat::Plain(
                crate::qwen3::generate::model_tokenizer(model)?,
            ));
        }
        let gguf = crate::gguf::Gguf::open(model)?;
        let vocab = crate::tokenizer::gguf_vocab::tokenizer_from_gguf(&gguf)?;
        let qwen = gguf
            .get_str("general.architecture")?
            .is_some_and(|arch| arch.starts_with("qwen"));
        Ok(PromptFormat::Gguf {
            file: model.to_path_buf(),
            vocab,
            qwen,
        })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        match self {
            PromptFormat::Plain(tok) => tok,
            PromptFormat::Gguf { vocab, .. } => &vocab.tokenizer,
        }
    }

    /// Whether `/v1/chat/completions` can be served: false for a GGUF file that carries no
    /// chat template.
    pub fn has_chat_template(&self) -> bool {
        match self {
            PromptFormat::Plain(_) => true,
            PromptFormat::Gguf { vocab, qwen, .. } => *qwen || vocab.chat_template.is_some(),
        }
    }

    /// Text continued as is (`/v1/completions`).
    pub fn text(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            PromptFormat::Plain(tok) => tok.encode(text),
            PromptFormat::Gguf { vocab, .. } => vocab.encode(text, true, true),
        }
    }

    /// The conversation in the model's chat template followed by the assistant's header and
    /// `prefill` (the start of the reply, often empty): (rendered text, ids). A model without
    /// a template is an error here; ask [`PromptFormat::has_chat_template`] first.
    pub fn chat(
        &self,
        conversation: &Conversation,
        opts: &ChatOptions,
        prefill: &str,
    ) -> Result<(String, Vec<u32>)> {
        let (text, ids) = match self {
            PromptFormat::Plain(tok) => {
                let text = conversation.render(opts)? + prefill;
                let ids = tok.encode(&text)?;
                (text, ids)
            }
            PromptFormat::Gguf { file, vocab, qwen } => {
                let text = if *qwen {
                    conversation.render(opts)
                } else {
                    crate::chat::jinja::render_gguf_chat(
                        file,
                        vocab,
                        &conversation.messages,
                        opts.add_generation_prompt,
                    )
                }? + prefill;
                let ids = vocab.encode(&text, true, true)?;
                (text, ids)
            }
        };
        Ok((text, ids))
    }
}
