//! The tokenizer a GGUF file carries (chapter 11, with chapter 4's tokenizer): llama.cpp
//! keeps a byte-level BPE vocabulary in the metadata instead of a `tokenizer.json`.
//!
//! | key | what |
//! |---|---|
//! | `tokenizer.ggml.model` | `"gpt2"` for byte-level BPE (the only kind read here) |
//! | `tokenizer.ggml.pre` | the pre-tokenizer by name: `"qwen2"` is Qwen's pattern, `"gpt-2"` GPT-2's, `"smollm"` GPT-2's after every digit is cut out |
//! | `tokenizer.ggml.tokens` | one string per id, in GPT-2's byte-to-unicode alphabet (as in `tokenizer.json`); added tokens as plain text |
//! | `tokenizer.ggml.token_type` | per id: 1 normal, 3 control, 4 user-defined (both added tokens), 5 unused (padding up to the embedding's rows) |
//! | `tokenizer.ggml.merges` | `"left right"` in priority order |
//! | `tokenizer.ggml.bos_token_id`, `eos_token_id`, `padding_token_id`, `add_bos_token` | the special ids |
//! | `tokenizer.chat_template` | the Jinja chat template |
//!
//! Read ([`tokenizer_from_gguf`]), every count and id is checked, and every problem is an
//! error naming the file and the key (with the index, for an element of an array). Written ([`gguf_tokenizer_metadata`]),
//! the keys are those llama.cpp's `convert_hf_to_gguf.py` writes for Qwen2 / Qwen3: added
//! tokens are control tokens when flagged special or shaped `<|…|>`, user-defined
//! otherwise, and ids without a token are `[PAD{id}]`, unused. A tiktoken vocabulary has no
//! merge list; its merges are recovered by running byte-rank BPE on each token with only
//! the lower ranks allowed, which stops at exactly two parts.
//!
//! llama.cpp does not put text in Unicode NFC, so the tokenizer read here does not either
//! (`nfc` false): on text that is not already NFC its ids are tiktoken's, not Hugging
//! Face's.

use super::Tokenizer;
use super::bpe::QWEN_PATTERN;
use super::pretokenize::SplitRule;
use super::special::AddedToken;
use super::spm::{SPACE_MARK, Spm};
use super::tokenizer_json::{GPT2_PATTERN, bytes_to_unicode};
use super::vocab::{MAX_ID, MergeRule, Vocab};
use crate::error::{Error, Result, excerpt};
use crate::gguf::{Gguf, MetaValue};
use rustc_hash::FxHashMap;
use std::path::Path;

pub const MODEL_KEY: &str = "tokenizer.ggml.model";
pub const PRE_KEY: &str = "tokenizer.ggml.pre";
pub const TOKENS_KEY: &str = "tokenizer.ggml.tokens";
pub const TYPES_KEY: &str = "tokenizer.ggml.token_type";
pub const MERGES_KEY: &str = "tokenizer.ggml.merges";
pub const BOS_KEY: &str = "tokenizer.ggml.bos_token_id";
pub const EOS_KEY: &str = "tokenizer.ggml.eos_token_id";
pub const PAD_KEY: &str = "tokenizer.ggml.padding_token_id";
pub const UNK_KEY: &str = "tokenizer.ggml.unknown_token_id";
pub const ADD_BOS_KEY: &str = "tokenizer.ggml.add_bos_token";
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";
pub const SCORES_KEY: &str = "tokenizer.ggml.scores";
pub const ADD_SPACE_PREFIX_KEY: &str = "tokenizer.ggml.add_space_prefix";

/// llama.cpp's token types (`llama_token_type`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// A GGUF file's tokenizer and the special ids and template that come with it.
pub struct GgufVocab {
    pub tokenizer: Tokenizer,
    /// Length of `tokenizer.ggml.tokens` (unused ids included: the embedding's rows).
    pub n_tokens: usize,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` (false when absent).
    pub add_bos: bool,
    pub chat_template: Option<String>,
}

impl GgufVocab {
    /// The ids llama.cpp's `tokenize(text, add_special, parse_special)` gives: BOS first
    /// when `add_special` and the file's `add_bos_token` say so, control tokens in the text
    /// matched only with `parse_special`.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if add_special && self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend(self.tokenizer.encode_special(text, parse_special)?);
        Ok(ids)
    }
}

/// The tokenizer of an opened GGUF file. When the file has an embedding
/// (`token_embd.weight`), its rows must be the tokens' count, as llama.cpp requires.
pub fn tokenizer_from_gguf(g: &Gguf) -> Result<GgufVocab> {
    let v = tokenizer_from_metadata(g.path(), g.metadata())?;
    if let Some(t) = g.tensor("token_embd.weight") {
        let rows = t.dims.get(1).copied().unwrap_or(1);
        if rows != v.n_tokens as u64 {
            return Err(Error::field(
                g.path().display().to_string(),
                "token_embd.weight",
                format!("{rows} rows but {TOKENS_KEY} has {} tokens", v.n_tokens),
            ));
        }
    }
    Ok(v)
}

/// Opens a GGUF file (checked whole, see [`Gguf::open`]) and reads its tokenizer.
pub fn open(path: &Path) -> Result<GgufVocab> {
    tokenizer_from_gguf(&Gguf::open(path)?)
}

/// The tokenizer described by GGUF metadata pairs (`file` names the source in errors).
pub fn tokenizer_from_metadata(file: &Path, metadata: &[(String, MetaValue)]) -> Result<GgufVocab> {
    let meta = Meta {
        what: file.display().to_string(),
        metadata,
    };
    let sentencepiece = is_sentencepiece(&meta)?;
    let (pattern, split_digits) = if sentencepiece {
        ("", false)
    } else {
        pre_tokenizer(&meta)?
    };
    let tokens = string_array(meta.get(TOKENS_KEY), TOKENS_KEY, &meta.what)?;
    if tokens.is_empty() {
        return Err(meta.err(TOKENS_KEY, "empty".into()));
    }
    if tokens.len() > MAX_ID as usize + 1 {
        let limit = MAX_ID as u64 + 1;
        let problem = format!("{} tokens, above the supported {limit}", tokens.len());
        return Err(meta.err(TOKENS_KEY, problem));
    }
    let n = tokens.len();
    let types = token_types(&meta, n)?;
    if let Some((arch_key, v)) = arch_vocab_size(metadata)
        && v.as_u64() != Some(n as u64)
    {
        let problem = format!("{} but {TOKENS_KEY} has {n} tokens", brief(v));
        return Err(meta.err(&arch_key, problem));
    }
    let split = split_tokens(&meta, &tokens, &types, sentencepiece)?;
    let merges = if sentencepiece {
        MergeRule::Pairs(FxHashMap::default())
    } else {
        MergeRule::Pairs(merge_pairs(&meta, &split.by_string)?)
    };
    let spm = if sentencepiece {
        Some(sentencepiece_model(&meta, &tokens, &split.byte_tokens)?)
    } else {
        None
    };
    let vocab = Vocab::new_missing_bytes(split.entries, merges, false, &meta.what)?;
    let special_id = |key: &str| -> Result<Option<u32>> {
        match meta.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(id) if id < n as u64 => Ok(Some(id as u32)),
                _ => Err(meta.err(key, format!("{} is not a token id (0..{n})", brief(v)))),
            },
        }
    };
    let add_bos = match meta.get(ADD_BOS_KEY) {
        None => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| meta.expected(ADD_BOS_KEY, v, "a bool"))?,
    };
    let chat_template = match meta.get(CHAT_TEMPLATE_KEY) {
        None => None,
        Some(v) => Some(
            v.as_str()
                .ok_or_else(|| meta.expected(CHAT_TEMPLATE_KEY, v, "a string"))?
                .to_string(),
        ),
    };
    let mut tokenizer = Tokenizer::new(vocab, split.added, pattern, false, &meta.what)?;
    tokenizer.split_digits = split_digits;
    tokenizer.spm = spm;
    Ok(GgufVocab {
        tokenizer,
        n_tokens: n,
        bos: special_id(BOS_KEY)?,
        eos: special_id(EOS_KEY)?,
        pad: special_id(PAD_KEY)?,
        unk: special_id(UNK_KEY)?,
        add_bos,
        chat_template,
    })
}

/// The metadata pairs and the file they came from (for messages).
struct Meta<'a> {
    what: String,
    metadata: &'a [(String, MetaValue)],
}

impl<'a> Meta<'a> {
    fn get(&self, key: &str) -> Option<&'a MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn err(&self, key: &str, problem: String) -> Error {
        Error::field(self.what.as_str(), key, problem)
    }

    fn expected(&self, key: &str, v: &MetaValue, what: &str) -> Error {
        self.err(key, format!("{}, expected {what}", v.type_name()))
    }
}

/// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE, false) or `"llama"` (SentencePiece
/// with scores and byte fallback, true).
fn is_sentencepiece(meta: &Meta) -> Result<bool> {
    let model = match meta.get(MODEL_KEY) {
        None => {
            let problem = "missing: the file carries no tokenizer".into();
            return Err(meta.err(MODEL_KEY, problem));
        }
        Some(v) => v
            .as_str()
            .ok_or_else(|| meta.expected(MODEL_KEY, v, "a string"))?,
    };
    let why = match model {
        "gpt2" => return Ok(false),
        "llama" => return Ok(true),
        "none" | "no_vocab" => "the file has no vocabulary (ids only)".to_string(),
        other => format!(
            "{} is not supported (only \"gpt2\", byte-level BPE, and \"llama\", SentencePiece)",
            excerpt(other)
        ),
    };
    Err(meta.err(MODEL_KEY, why))
}

/// The pre-tokenizer llama.cpp runs for `tokenizer.ggml.pre` (llama-vocab.cpp): the
/// pattern, and whether every numeric character is cut out first (`smollm` runs `\p{N}`
/// and then GPT-2's pattern on what lies between).
fn pre_tokenizer(meta: &Meta) -> Result<(&'static str, bool)> {
    let Some(v) = meta.get(PRE_KEY) else {
        return Err(meta.err(PRE_KEY, "missing (the pre-tokenizer's name)".into()));
    };
    match v.as_str() {
        Some("qwen2") => Ok((QWEN_PATTERN, false)),
        Some("gpt-2") => Ok((GPT2_PATTERN, false)),
        Some("smollm") => Ok((GPT2_PATTERN, true)),
        Some(other) => Err(meta.err(
            PRE_KEY,
            format!(
                "{} is not supported (\"qwen2\", \"gpt-2\" or \"smollm\")",
                excerpt(other)
            ),
        )),
        None => Err(meta.expected(PRE_KEY, v, "a string")),
    }
}

/// `tokenizer.ggml.token_type`, checked (all normal when absent).
fn token_types(meta: &Meta, n: usize) -> Result<Vec<i32>> {
    let Some(v) = meta.get(TYPES_KEY) else {
        return Ok(vec![token_type::NORMAL; n]);
    };
    let a = v
        .as_array()
        .ok_or_else(|| meta.expected(TYPES_KEY, v, "an array"))?;
    if a.len() != n {
        let problem = format!("{} entries for {n} tokens ({TOKENS_KEY})", a.len());
        return Err(meta.err(TYPES_KEY, problem));
    }
    a.iter()
        .enumerate()
        .map(|(i, t)| {
            let ty = as_i64(t).filter(|t| (1..=6).contains(t)).ok_or_else(|| {
                let problem = format!("{} is not a token type (1 to 6)", brief(t));
                meta.err(&format!("{TYPES_KEY}[{i}]"), problem)
            })?;
            Ok(ty as i32)
        })
        .collect()
}

/// The tokens sorted by their type: normal tokens as bytes for the vocabulary, control,
/// user-defined and unknown ones as added tokens.
struct SplitTokens<'a> {
    entries: Vec<(Vec<u8>, u32)>,
    added: Vec<AddedToken>,
    by_string: FxHashMap<&'a str, u32>,
    /// SentencePiece's `<0xXX>` tokens (type 6) and their bytes.
    byte_tokens: Vec<(u32, u8)>,
}

/// A normal token's bytes: byte-level BPE maps GPT-2's alphabet back to bytes,
/// SentencePiece turns `▁` into a space.
fn normal_bytes(text: &str, inverse: &FxHashMap<char, u8>, sentencepiece: bool) -> Option<Vec<u8>> {
    if sentencepiece {
        return Some(text.replace(SPACE_MARK, " ").into_bytes());
    }
    text.chars().map(|c| inverse.get(&c).copied()).collect()
}

/// `<0xXX>` → the byte.
fn byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

fn split_tokens<'a>(
    meta: &Meta,
    tokens: &[&'a str],
    types: &[i32],
    sentencepiece: bool,
) -> Result<SplitTokens<'a>> {
    let b2u = bytes_to_unicode();
    let inverse: FxHashMap<char, u8> = b2u.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
    let mut out = SplitTokens {
        entries: Vec::with_capacity(tokens.len()),
        added: Vec::new(),
        by_string: FxHashMap::default(),
        byte_tokens: Vec::new(),
    };
    let mut added_ids: FxHashMap<&str, usize> = FxHashMap::default();
    for (i, (&text, &ty)) in tokens.iter().zip(types).enumerate() {
        let id = i as u32;
        let at = || format!("{TOKENS_KEY}[{i}]");
        if text.is_empty() && ty != token_type::UNUSED {
            return Err(meta.err(&at(), "empty token".into()));
        }
        match ty {
            token_type::NORMAL => {
                let bytes = normal_bytes(text, &inverse, sentencepiece).ok_or_else(|| {
                    let problem = format!("{} is not in the byte-level alphabet", excerpt(text));
                    meta.err(&at(), problem)
                })?;
                if out.by_string.insert(text, id).is_some() {
                    return Err(meta.err(&at(), format!("{} appears twice", excerpt(text))));
                }
                out.entries.push((bytes, id));
            }
            token_type::CONTROL | token_type::USER_DEFINED | token_type::UNKNOWN => {
                if let Some(first) = added_ids.insert(text, i) {
                    let problem = format!("{} is also token {first}", excerpt(text));
                    return Err(meta.err(&at(), problem));
                }
                out.added.push(AddedToken {
                    content: text.to_string(),
                    id,
                    special: ty != token_type::USER_DEFINED,
                });
            }
            token_type::UNUSED => {}
            token_type::BYTE if sentencepiece => {
                let b = byte_token(text).ok_or_else(|| {
                    meta.err(
                        &at(),
                        format!("{} is not a byte token <0xXX>", excerpt(text)),
                    )
                })?;
                out.byte_tokens.push((id, b));
            }
            _ => {
                return Err(meta.err(
                    &format!("{TYPES_KEY}[{i}]"),
                    "type 6 (byte) belongs to SentencePiece vocabularies, not byte-level BPE"
                        .into(),
                ));
            }
        }
    }
    Ok(out)
}

/// The SentencePiece model: every token with its score (`tokenizer.ggml.scores`, one
/// finite f32 per token), the byte tokens, and `tokenizer.ggml.add_space_prefix` (true
/// when absent, llama.cpp's default for this model).
fn sentencepiece_model(meta: &Meta, tokens: &[&str], byte_tokens: &[(u32, u8)]) -> Result<Spm> {
    let v = meta
        .get(SCORES_KEY)
        .ok_or_else(|| meta.err(SCORES_KEY, "missing (SentencePiece needs scores)".into()))?;
    let a = v
        .as_array()
        .ok_or_else(|| meta.expected(SCORES_KEY, v, "an array"))?;
    if a.len() != tokens.len() {
        let problem = format!(
            "{} entries for {} tokens ({TOKENS_KEY})",
            a.len(),
            tokens.len()
        );
        return Err(meta.err(SCORES_KEY, problem));
    }
    let scores = a
        .iter()
        .enumerate()
        .map(|(i, x)| match x {
            MetaValue::F32(f) if f.is_finite() => Ok(*f),
            other => Err(meta.err(
                &format!("{SCORES_KEY}[{i}]"),
                format!("{} is not a finite f32", brief(other)),
            )),
        })
        .collect::<Result<Vec<f32>>>()?;
    let mut spm = Spm::new(tokens, scores, byte_tokens);
    spm.add_space_prefix = match meta.get(ADD_SPACE_PREFIX_KEY) {
        None => true,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| meta.expected(ADD_SPACE_PREFIX_KEY, v, "a bool"))?,
    };
    Ok(spm)
}

/// `tokenizer.ggml.merges` as `(left, right) → (rank, merged)` over the normal tokens.
fn merge_pairs(
    meta: &Meta,
    by_string: &FxHashMap<&str, u32>,
) -> Result<FxHashMap<(u32, u32), (u32, u32)>> {
    let merges = string_array(meta.get(MERGES_KEY), MERGES_KEY, &meta.what)?;
    let mut pairs = FxHashMap::with_capacity_and_hasher(merges.len(), Default::default());
    let mut joined = String::new();
    for (rank, m) in merges.iter().enumerate() {
        let at = || format!("{MERGES_KEY}[{rank}]");
        let mut it = m.split(' ');
        let (Some(l), Some(r), None) = (it.next(), it.next(), it.next()) else {
            return Err(meta.err(&at(), format!("{} is not `left right`", excerpt(m))));
        };
        let id = |t: &str| {
            by_string.get(t).copied().ok_or_else(|| {
                let problem = format!("{} is not a normal token of {TOKENS_KEY}", excerpt(t));
                meta.err(&at(), problem)
            })
        };
        joined.clear();
        joined.push_str(l);
        joined.push_str(r);
        let (li, ri, merged) = (id(l)?, id(r)?, id(&joined)?);
        // The first occurrence of a pair wins, as in llama.cpp's and Hugging Face's loaders.
        pairs.entry((li, ri)).or_insert((rank as u32, merged));
    }
    Ok(pairs)
}

/// `{general.architecture}.vocab_size`, when both keys are there.
fn arch_vocab_size(metadata: &[(String, MetaValue)]) -> Option<(String, &MetaValue)> {
    let arch = metadata
        .iter()
        .find(|(k, _)| k == "general.architecture")
        .and_then(|(_, v)| v.as_str())?;
    let key = format!("{arch}.vocab_size");
    metadata
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| (key.clone(), v))
}

/// An array of strings under `key` (required).
fn string_array<'a>(v: Option<&'a MetaValue>, key: &str, what: &str) -> Result<Vec<&'a str>> {
    let v = v.ok_or_else(|| Error::field(what, key, "missing"))?;
    let a = v
        .as_array()
        .ok_or_else(|| Error::field(what, key, format!("{}, expected an array", v.type_name())))?;
    a.iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str().ok_or_else(|| {
                Error::field(
                    what,
                    format!("{key}[{i}]"),
                    format!("{}, expected a string", s.type_name()),
                )
            })
        })
        .collect()
}

/// Any integer, signed or not.
fn as_i64(v: &MetaValue) -> Option<i64> {
    match *v {
        MetaValue::I8(x) => Some(x.into()),
        MetaValue::I16(x) => Some(x.into()),
        MetaValue::I32(x) => Some(x.into()),
        MetaValue::I64(x) => Some(x),
        _ => v.as_u64().and_then(|x| i64::try_from(x).ok()),
    }
}

/// A value as a message quotes it.
fn brief(v: &MetaValue) -> String {
    match v {
        MetaValue::Str(s) => excerpt(s),
        MetaValue::Array(a) => format!("an array of {}", a.len()),
        MetaValue::Bool(b) => b.to_string(),
        MetaValue::F32(x) => x.to_string(),
        MetaValue::F64(x) => x.to_string(),
        other => as_i64(other).map_or_else(|| other.type_name().to_string(), |x| x.to_string()),
    }
}

/// The tokenizer keys llama.cpp's converter writes for a Qwen model, for a vocabulary of
/// exactly [`Tokenizer::n_ids`] ids (see [`gguf_tokenizer_metadata_for`], which also checks
/// that llama.cpp has a name for the pre-tokenizer).
pub fn gguf_tokenizer_metadata(tok: &Tokenizer) -> Vec<(String, MetaValue)> {
    build_metadata(tok, tok.n_ids(), None)
}

/// [`gguf_tokenizer_metadata`] padded with unused `[PAD{id}]` tokens up to `vocab_size` (the
/// model's embedding rows, as the converter pads), with a chat template. Errors if the
/// tokenizer has more ids than `vocab_size`.
pub fn gguf_tokenizer_metadata_for(
    tok: &Tokenizer,
    vocab_size: usize,
    chat_template: Option<&str>,
) -> Result<Vec<(String, MetaValue)>> {
    if vocab_size < tok.n_ids() {
        return Err(Error::field(
            tok.name.as_str(),
            "vocab_size",
            format!("{vocab_size} is below the tokenizer's {} ids", tok.n_ids()),
        ));
    }
    if pre_tokenizer_name(tok).is_none() {
        return Err(Error::field(
            tok.name.as_str(),
            "pre_tokenizer",
            "llama.cpp names no pre-tokenizer for this pattern and split rule \
             (Qwen's or GPT-2's pattern, split the Isolated way, can be written)",
        ));
    }
    Ok(build_metadata(tok, vocab_size, chat_template))
}

/// The `tokenizer.ggml.pre` name llama.cpp gives the tokenizer's pre-tokenizer, if any.
fn pre_tokenizer_name(tok: &Tokenizer) -> Option<&'static str> {
    if tok.split != SplitRule::default() {
        return None;
    }
    match (tok.pattern.as_str(), tok.split_digits) {
        (QWEN_PATTERN, false) => Some("qwen2"),
        (GPT2_PATTERN, false) => Some("gpt-2"),
        (GPT2_PATTERN, true) => Some("smollm"),
        _ => None,
    }
}

fn build_metadata(
    tok: &Tokenizer,
    vocab_size: usize,
    chat_template: Option<&str>,
) -> Vec<(String, MetaValue)> {
    let b2u = bytes_to_unicode();
    let text = |b: &[u8]| -> String { b.iter().map(|&x| b2u[x as usize]).collect() };
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for id in 0..vocab_size as u32 {
        if let Some(t) = tok.added.get(id) {
            let looks_special = t.content.starts_with("<|") && t.content.ends_with("|>");
            tokens.push(MetaValue::Str(t.content.clone()));
            types.push(MetaValue::I32(if t.special || looks_special {
                token_type::CONTROL
            } else {
                token_type::USER_DEFINED
            }));
        } else if let Some(b) = tok.vocab.token(id) {
            tokens.push(MetaValue::Str(text(b)));
            types.push(MetaValue::I32(token_type::NORMAL));
        } else {
            tokens.push(MetaValue::Str(format!("[PAD{id}]")));
            types.push(MetaValue::I32(token_type::UNUSED));
        }
    }
    let merges = merge_list(&tok.vocab)
        .into_iter()
        .map(|(l, r)| MetaValue::Str(format!("{} {}", text(l), text(r))))
        .collect();
    let str_ = |s: &str| MetaValue::Str(s.to_string());
    // A pattern llama.cpp has no name for is written as "default", which this reader
    // refuses ([`gguf_tokenizer_metadata_for`] refuses to write it).
    let pre = pre_tokenizer_name(tok).unwrap_or("default");
    let mut out = vec![
        (MODEL_KEY.to_string(), str_("gpt2")),
        (PRE_KEY.to_string(), str_(pre)),
        (TOKENS_KEY.to_string(), MetaValue::Array(tokens)),
        (TYPES_KEY.to_string(), MetaValue::Array(types)),
        (MERGES_KEY.to_string(), MetaValue::Array(merges)),
    ];
    // Qwen's config.json and tokenizer_config.json: bos and pad <|endoftext|>, eos <|im_end|>
    // (the instruct models' end of turn) when the tokenizer has it.
    let endoftext = tok.added.id_of("<|endoftext|>");
    let eos = tok.added.id_of("<|im_end|>").or(endoftext);
    for (key, id) in [(BOS_KEY, endoftext), (EOS_KEY, eos), (PAD_KEY, endoftext)] {
        if let Some(id) = id {
            out.push((key.to_string(), MetaValue::U32(id)));
        }
    }
    out.push((ADD_BOS_KEY.to_string(), MetaValue::Bool(false)));
    if let Some(t) = chat_template {
        out.push((CHAT_TEMPLATE_KEY.to_string(), str_(t)));
    }
    out
}

/// The merges of a vocabulary in priority order, as byte strings `(left, right)`.
fn merge_list(vocab: &Vocab) -> Vec<(&[u8], &[u8])> {
    match &vocab.merges {
        MergeRule::Pairs(m) => {
            let mut v: Vec<(u32, u32, u32)> =
                m.iter().map(|(&(l, r), &(rank, _))| (rank, l, r)).collect();
            v.sort_unstable();
            v.into_iter()
                .filter_map(|(_, l, r)| Some((vocab.token(l)?, vocab.token(r)?)))
                .collect()
        }
        MergeRule::ByteRank => vocab
            .iter()
            .filter(|(_, b)| b.len() > 1)
            .filter_map(|(rank, b)| {
                let parts = byte_rank_parts(vocab, b, rank);
                (parts.len() == 2).then(|| (parts[0], parts[1]))
            })
            .collect(),
    }
}

/// Byte-rank BPE on `token` with only ranks below `below` allowed: the parts it stops at
/// (two for every token of a tiktoken vocabulary, which is how its merge list is recovered).
fn byte_rank_parts<'a>(vocab: &Vocab, token: &'a [u8], below: u32) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = (0..=token.len()).collect();
    loop {
        let mut best: Option<(u32, usize)> = None;
        for i in 0..cuts.len().saturating_sub(2) {
            if let Some(rank) = vocab.id(&token[cuts[i]..cuts[i + 2]])
                && rank < below
                && best.is_none_or(|(b, _)| rank < b)
            {
                best = Some((rank, i));
            }
        }
        match best {
            Some((_, i)) => {
                cuts.remove(i + 1);
            }
            None => break,
        }
    }
    cuts.windows(2).map(|w| &token[w[0]..w[1]]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(pairs: Vec<(&str, MetaValue)>) -> Vec<(String, MetaValue)> {
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    fn strs(v: &[&str]) -> MetaValue {
        MetaValue::Array(v.iter().map(|s| MetaValue::Str(s.to_string())).collect())
    }

    /// A tiny vocabulary: the 256 bytes, "ab", and one control token.
    fn tiny() -> Vec<(String, MetaValue)> {
        let b2u = bytes_to_unicode();
        let mut toks: Vec<String> = (0..256).map(|b| b2u[b].to_string()).collect();
        toks.push("ab".into());
        toks.push("<|end|>".into());
        let mut types = vec![MetaValue::I32(1); 257];
        types.push(MetaValue::I32(3));
        meta(vec![
            (MODEL_KEY, MetaValue::Str("gpt2".into())),
            (PRE_KEY, MetaValue::Str("qwen2".into())),
            (
                TOKENS_KEY,
                MetaValue::Array(toks.into_iter().map(MetaValue::Str).collect()),
            ),
            (TYPES_KEY, MetaValue::Array(types)),
            (MERGES_KEY, strs(&["a b"])),
            (EOS_KEY, MetaValue::U32(257)),
        ])
    }

    #[test]
    fn tiny_vocabulary_round_trips() {
        let v = tokenizer_from_metadata(Path::new("t.gguf"), &tiny()).unwrap();
        assert_eq!(v.n_tokens, 258);
        assert_eq!(v.eos, Some(257));
        assert_eq!(v.tokenizer.encode("ab<|end|>").unwrap(), vec![256, 257]);
        let back = gguf_tokenizer_metadata(&v.tokenizer);
        let again = tokenizer_from_metadata(Path::new("u"), &back).unwrap();
        assert_eq!(
            again.tokenizer.encode("xab<|end|>").unwrap(),
            vec![120, 256, 257]
        );
    }

    #[test]
    fn byte_rank_parts_split_in_two() {
        let v = Tokenizer::qwen().unwrap();
        let id = v.vocab.id(b" hello").unwrap();
        let parts = byte_rank_parts(&v.vocab, b" hello", id);
        assert_eq!(parts.len(), 2);
    }
}
