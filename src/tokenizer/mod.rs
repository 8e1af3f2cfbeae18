//! Chapter 4 — the tokenizer (source S0 5.3: special tokens, glitch tokens, the
//! embedding-norm picture of the training data).
//!
//! A byte-level BPE tokenizer in three steps: added tokens such as `<|im_start|>` are cut
//! out of the text first and map to one id each ([`special`]); the rest is split into
//! pieces by Qwen's regular expression and each piece is merged from single bytes up by
//! rank ([`bpe`]); decoding concatenates the tokens' bytes. The vocabulary ([`vocab`]) is
//! Qwen's (151,643 ranks, `data/qwen.tiktoken`), read from a tiktoken file ([`tiktoken`]), a
//! Hugging Face `tokenizer.json` ([`tokenizer_json`]) or a GGUF file's metadata
//! ([`gguf_vocab`], chapter 11). [`glitch`] scans it for suspicious tokens and screens a
//! checkpoint's embeddings for rows that training never reached.
//! [`parse_id_ranges`] reads the id lists (`1,2,5-9`) that the command line takes.
//!
//! Claims backed here: `tok.special`, `tok.glitch_ids`, `tok.literal_scan`,
//! `tok.norm_scan`, `tok.glitch_norms`, `tok.vocab_sizes`.
//!
//! Exactness: with a tiktoken file the ids equal tiktoken's (no normalisation). With a
//! Hugging Face `tokenizer.json` whose normalizer is NFC (Qwen's is), the text outside added
//! tokens is put in NFC first, as `tokenizers` does, so the two differ on text that is not
//! already NFC (e.g. a decomposed "é").

pub mod bpe;
pub mod gguf_vocab;
pub mod glitch;
pub mod ids;
pub mod pretokenize;
pub mod special;
pub mod spm;
pub mod tiktoken;
pub mod tokenizer_json;
pub mod vocab;

pub use ids::parse_id_ranges;

use crate::error::{Error, Result};
use bpe::Bpe;
use pretokenize::{SplitRule, digit_fragments, for_each_piece};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use special::{AddedToken, AddedTokens, Segment};
use std::path::Path;
use std::sync::OnceLock;
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};
use vocab::Vocab;

/// A byte-level BPE tokenizer: vocabulary, added tokens, pre-tokenizer, normaliser.
pub struct Tokenizer {
    pub vocab: Vocab,
    pub added: AddedTokens,
    /// The pre-tokenizer's pattern (see [`bpe::QWEN_PATTERN`]).
    pub pattern: String,
    /// What the pattern's matches and the text between them become
    /// ([`pretokenize`]; Isolated unless a `tokenizer.json` says otherwise).
    pub split: SplitRule,
    /// Cut every numeric character out as a piece of its own before the pattern runs
    /// (llama.cpp's `smollm` pre-tokenizer, Hugging Face's `Digits` with
    /// `individual_digits`).
    pub split_digits: bool,
    /// A SentencePiece vocabulary (GGUF `tokenizer.ggml.model` "llama"): text between
    /// added tokens goes to it instead of the pattern and BPE.
    pub spm: Option<spm::Spm>,
    /// The added tokens not flagged special (llama.cpp's user-defined ones), which are
    /// matched even when special tokens are not ([`Tokenizer::encode_special`]).
    plain_added: AddedTokens,
    regex: fancy_regex::Regex,
    /// One compiled copy per rayon thread: copies of a `Regex` share one cache pool,
    /// whose fast path serves only the thread that used it first (tiktoken keeps
    /// per-thread copies for the same reason).
    thread_regexes: Vec<OnceLock<fancy_regex::Regex>>,
    /// Put text in Unicode NFC before splitting it (Hugging Face's Qwen normalizer).
    pub nfc: bool,
    /// Where the vocabulary came from (for messages).
    pub name: String,
}

/// What [`Tokenizer::decode_checked`] returns (`anatomy detokenize --json`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Decoded {
    pub text: String,
    pub valid_utf8: bool,
}

/// Bytes of text per parallel chunk in [`Tokenizer::encode_parallel`].
const CHUNK_BYTES: usize = 64 * 1024;
/// Per-thread regex copies kept (threads past this share a copy).
const THREAD_REGEXES: usize = 64;

impl Tokenizer {
    /// Assembles a tokenizer; checks that added tokens do not reuse a vocabulary id for
    /// other bytes and that the pattern compiles.
    pub fn new(
        vocab: Vocab,
        added: Vec<AddedToken>,
        pattern: &str,
        nfc: bool,
        name: &str,
    ) -> Result<Self> {
        for t in &added {
            if let Some(b) = vocab.token(t.id)
                && b != t.content.as_bytes()
            {
                return Err(Error::field(
                    name,
                    "added_tokens",
                    format!(
                        "{} has id {}, which the vocabulary gives to {}",
                        crate::error::excerpt(&t.content),
                        t.id,
                        crate::error::excerpt(&String::from_utf8_lossy(b))
                    ),
                ));
            }
        }
        let plain: Vec<AddedToken> = added.iter().filter(|t| !t.special).cloned().collect();
        let plain_added = AddedTokens::new(plain, name)?;
        let added = AddedTokens::new(added, name)?;
        let regex = fancy_regex::Regex::new(pattern).map_err(|e| {
            Error::field(
                name,
                "pre_tokenizer",
                format!("pattern does not compile: {e}"),
            )
        })?;
        Ok(Self {
            vocab,
            added,
            pattern: pattern.to_string(),
            split: SplitRule::default(),
            split_digits: false,
            spm: None,
            plain_added,
            regex,
            thread_regexes: (0..THREAD_REGEXES).map(|_| OnceLock::new()).collect(),
            nfc,
            name: name.to_string(),
        })
    }

    /// A tiktoken vocabulary with Qwen3's added tokens and pre-tokenizer, and Qwen's NFC
    /// normaliser: the ids equal those of Qwen's own tokenizers (dashscope's
    /// `QwenTokenizer` and `tokenizer.json` both put text in NFC first). Set `nfc` to false
    /// for tiktoken's raw ids, which differ on text that is not already in NFC.
    pub fn from_tiktoken(bytes: &[u8], name: &str) -> Result<Self> {
        let vocab = tiktoken::parse_tiktoken(bytes, name)?;
        Self::new(
            vocab,
            special::qwen3_added_tokens(),
            bpe::QWEN_PATTERN,
            true,
            name,
        )
    }

    /// A Hugging Face `tokenizer.json` (byte-level BPE).
    pub fn from_tokenizer_json(doc: &serde_json::Value, name: &str) -> Result<Self> {
        let p = tokenizer_json::parse_tokenizer_json(doc, name)?;
        let mut tok = Self::new(p.vocab, p.added, &p.pattern, p.nfc, name)?;
        tok.split = p.split;
        Ok(tok)
    }

    /// Loads either format: a `.json` file (or one whose first byte is `{`) is read as
    /// `tokenizer.json`, anything else as a tiktoken file. Only a regular file of at most
    /// [`crate::limits::TEXT_FILE_BYTES`] is read. A `.gguf` file gives the tokenizer in
    /// its metadata ([`gguf_vocab`]).
    pub fn from_file(path: &Path) -> Result<Self> {
        // A GGUF file (a model or a vocabulary-only one) carries its tokenizer.
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            return Ok(gguf_vocab::open(path)?.tokenizer);
        }
        let bytes = crate::error::read_file(path)?;
        let json = path.extension().is_some_and(|e| e == "json");
        Self::from_bytes(&bytes, json, &path.display().to_string())
    }

    /// [`Tokenizer::from_file`] on bytes already read: `json` forces the tokenizer.json
    /// reading (otherwise it is chosen by a first non-blank byte `{`); `name` names the
    /// source in errors.
    pub fn from_bytes(bytes: &[u8], json: bool, name: &str) -> Result<Self> {
        let is_json = json || bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        if is_json {
            let doc: serde_json::Value =
                serde_json::from_slice(bytes).map_err(|source| Error::Json {
                    what: name.to_string(),
                    source,
                })?;
            Self::from_tokenizer_json(&doc, name)
        } else {
            Self::from_tiktoken(bytes, name)
        }
    }

    /// The Qwen vocabulary shipped in `data/qwen.tiktoken`.
    pub fn qwen() -> Result<Self> {
        Self::from_file(&qwen_vocab_path())
    }

    /// Number of id slots: the vocabulary's and the added tokens' (highest id + 1).
    pub fn n_ids(&self) -> usize {
        self.vocab
            .len()
            .max(self.added.max_id().map_or(0, |m| m as usize + 1))
    }

    // ANCHOR: encode
    /// Encodes text: added tokens are recognised anywhere and never split; every other
    /// stretch is (optionally NFC-normalised,) pre-tokenized and merged by BPE.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut bpe = Bpe::default();
        let mut after_added = true;
        for segment in self.added.split(text) {
            match segment {
                Segment::Added(id) => out.push(id),
                Segment::Text(t) => self.encode_text(t, after_added, &mut bpe, &mut out)?,
            }
            after_added = matches!(segment, Segment::Added(_));
        }
        Ok(out)
    }
    // ANCHOR_END: encode

    /// The distinct bytes of `text` (outside added tokens) that this vocabulary has no
    /// token for, which [`Tokenizer::encode`] leaves out as llama.cpp does (SmolLM2's GGUF
    /// lacks a few control characters). For a SentencePiece vocabulary: the bytes of
    /// characters that are no token and whose byte has no `<0xXX>` token. Empty whenever
    /// every byte has a token.
    pub fn bytes_without_token(&self, text: &str) -> Vec<u8> {
        let mut missing = [false; 256];
        for segment in self.added.split(text) {
            let Segment::Text(t) = segment else { continue };
            match &self.spm {
                Some(spm) => spm.mark_bytes_without_token(t, &mut missing),
                None if self.vocab.missing_bytes => {
                    for b in t.bytes() {
                        missing[b as usize] |= self.vocab.byte_id(b) == vocab::NO_BYTE;
                    }
                }
                None => {}
            }
        }
        (0..=255u8).filter(|&b| missing[b as usize]).collect()
    }

    /// llama.cpp's `tokenize(text, parse_special)`: with `parse_special` false, the
    /// special (control) tokens are plain characters but the other added tokens are
    /// still matched.
    pub fn encode_special(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        if parse_special {
            return self.encode(text);
        }
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut bpe = Bpe::default();
        let mut after_added = true;
        for segment in self.plain_added.split(text) {
            match segment {
                Segment::Added(id) => out.push(id),
                Segment::Text(t) => self.encode_text(t, after_added, &mut bpe, &mut out)?,
            }
            after_added = matches!(segment, Segment::Added(_));
        }
        Ok(out)
    }

    /// Encodes text with no added-token recognition: `<|im_start|>` is just characters.
    pub fn encode_ordinary(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_text(text, true, &mut Bpe::default(), &mut out)?;
        Ok(out)
    }

    /// One stretch without added tokens, by SentencePiece or by pattern and BPE
    /// (`after_added`: it starts the input or follows an added token).
    fn encode_text(
        &self,
        text: &str,
        after_added: bool,
        bpe: &mut Bpe,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        match &self.spm {
            Some(spm) => {
                spm.encode(text, after_added, out);
                Ok(())
            }
            None => self.encode_ordinary_into(&self.regex, text, bpe, out),
        }
    }

    /// The pre-tokenizer's pieces of `text` (no normalisation, no added tokens).
    pub fn pieces<'a>(&self, text: &'a str) -> Result<Vec<&'a str>> {
        let mut out = Vec::new();
        self.for_each_piece(&self.regex, text, |p| out.push(p))?;
        Ok(out)
    }

    /// The pre-tokenizer: digits cut out first when `split_digits`, then the pattern.
    fn for_each_piece<'t>(
        &self,
        regex: &fancy_regex::Regex,
        text: &'t str,
        mut piece: impl FnMut(&'t str),
    ) -> Result<()> {
        if !self.split_digits {
            return for_each_piece(regex, self.split, text, &self.name, piece);
        }
        for (fragment, is_digit) in digit_fragments(text) {
            if is_digit {
                piece(fragment);
            } else {
                for_each_piece(regex, self.split, fragment, &self.name, &mut piece)?;
            }
        }
        Ok(())
    }

    fn encode_ordinary_into(
        &self,
        regex: &fancy_regex::Regex,
        text: &str,
        bpe: &mut Bpe,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        if self.nfc && is_nfc_quick(text.chars()) != IsNormalized::Yes {
            let normalized: String = text.nfc().collect();
            return self.encode_pieces(regex, &normalized, bpe, out);
        }
        self.encode_pieces(regex, text, bpe, out)
    }

    /// Pre-tokenize and merge. Pieces that are not whole tokens are remembered, so a
    /// repeated long word is merged once per call.
    fn encode_pieces(
        &self,
        regex: &fancy_regex::Regex,
        text: &str,
        bpe: &mut Bpe,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut cache: FxHashMap<&str, (usize, usize)> = FxHashMap::default();
        let mut cached_ids: Vec<u32> = Vec::new();
        self.for_each_piece(regex, text, |piece| {
            if self.vocab.whole_piece_first
                && let Some(id) = self.vocab.id(piece.as_bytes())
            {
                out.push(id);
                return;
            }
            if let Some(&(s, e)) = cache.get(piece) {
                out.extend_from_slice(&cached_ids[s..e]);
                return;
            }
            let before = out.len();
            bpe.encode_piece(&self.vocab, piece.as_bytes(), out);
            if self.vocab.missing_bytes {
                drop_missing_bytes(out, before);
            }
            if piece.len() > 1 {
                let s = cached_ids.len();
                cached_ids.extend_from_slice(&out[before..]);
                cache.insert(piece, (s, cached_ids.len()));
            }
        })
    }

    /// Same ids as [`Tokenizer::encode`], computed on rayon's threads: the text is cut into
    /// chunks only at places where a new pre-token piece must begin (an ASCII space between
    /// two ASCII letters, or a newline followed by a non-whitespace character), so the pieces — and
    /// the ids — are exactly those of the sequential pass.
    pub fn encode_parallel(&self, text: &str) -> Result<Vec<u32>> {
        // The cut points are safe for Qwen's pattern cut the default way only.
        if self.pattern != bpe::QWEN_PATTERN
            || self.split != SplitRule::default()
            || self.split_digits
            || self.spm.is_some()
        {
            return self.encode(text);
        }
        let segments = self.added.split(text);
        // Few, large chunks: each job starts with an empty piece cache.
        let chunk = CHUNK_BYTES.max(text.len() / (8 * rayon::current_num_threads()));
        let mut jobs: Vec<Segment> = Vec::new();
        for s in segments {
            match s {
                Segment::Text(t) if t.len() > chunk => {
                    jobs.extend(safe_chunks(t, chunk).map(Segment::Text))
                }
                other => jobs.push(other),
            }
        }
        let parts: Vec<Vec<u32>> = jobs
            .par_iter()
            .map(|s| match *s {
                Segment::Added(id) => Ok(vec![id]),
                Segment::Text(t) => {
                    let mut out = Vec::with_capacity(t.len() / 3 + 1);
                    self.encode_ordinary_into(
                        self.thread_regex(),
                        t,
                        &mut Bpe::default(),
                        &mut out,
                    )?;
                    Ok(out)
                }
            })
            .collect::<Result<_>>()?;
        Ok(parts.concat())
    }

    /// This rayon thread's copy of the pre-tokenizer regex.
    fn thread_regex(&self) -> &fancy_regex::Regex {
        let slot = rayon::current_thread_index().unwrap_or(0) % THREAD_REGEXES;
        self.thread_regexes[slot].get_or_init(|| {
            fancy_regex::Regex::new(&self.pattern).unwrap_or_else(|_| self.regex.clone())
        })
    }

    /// The bytes of a sequence of ids (added tokens give their text). An id that is
    /// neither in the vocabulary nor an added token is an error naming it.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            out.extend_from_slice(self.token_bytes(id)?);
        }
        Ok(out)
    }

    /// The bytes of one id.
    pub fn token_bytes(&self, id: u32) -> Result<&[u8]> {
        if let Some(b) = self.spm.as_ref().and_then(|s| s.byte_of(id)) {
            return Ok(std::slice::from_ref(b));
        }
        if let Some(b) = self.vocab.token(id) {
            return Ok(b);
        }
        self.added
            .get(id)
            .map(|t| t.content.as_bytes())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: token id {id} is not in the vocabulary (ids 0..{})",
                    self.name,
                    self.n_ids()
                ))
            })
    }

    // ANCHOR: decode
    /// Decodes to text. Bytes that are not valid UTF-8 (a token sequence cut inside a
    /// character) become U+FFFD, one per maximal invalid subsequence, as Hugging Face's
    /// ByteLevel decoder and Python's `errors="replace"` do.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }
    // ANCHOR_END: decode

    /// [`Tokenizer::decode`]'s text, and whether the bytes were valid UTF-8 (false when a
    /// U+FFFD stands for a character the ids cut).
    pub fn decode_checked(&self, ids: &[u32]) -> Result<Decoded> {
        let bytes = self.decode_bytes(ids)?;
        Ok(Decoded {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            valid_utf8: std::str::from_utf8(&bytes).is_ok(),
        })
    }

    /// One line per id: the id, then its token's bytes as a quoted string (invalid UTF-8 as
    /// U+FFFD), as `anatomy tokenize` prints them.
    pub fn id_table(&self, ids: &[u32]) -> Result<String> {
        let mut s = String::new();
        for &id in ids {
            let piece = String::from_utf8_lossy(self.token_bytes(id)?);
            s.push_str(&format!("{id:>7}  {piece:?}\n"));
        }
        Ok(s)
    }
}

/// Removes the [`vocab::NO_BYTE`] ids from `out[from..]`: llama.cpp's BPE emits nothing
/// for a byte its vocabulary lacks.
fn drop_missing_bytes(out: &mut Vec<u32>, from: usize) {
    let mut kept = from;
    for i in from..out.len() {
        if out[i] != vocab::NO_BYTE {
            out[kept] = out[i];
            kept += 1;
        }
    }
    out.truncate(kept);
}

/// Where the shipped Qwen vocabulary lives.
pub fn qwen_vocab_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/qwen.tiktoken")
}

/// Cuts `text` into chunks of about `target` bytes at positions where the Qwen
/// pre-tokenizer always starts a new piece (see [`Tokenizer::encode_parallel`]). A chunk
/// with no such position is left whole.
pub fn safe_chunks(text: &str, target: usize) -> impl Iterator<Item = &str> {
    let b = text.as_bytes();
    let mut start = 0usize;
    std::iter::from_fn(move || {
        if start >= b.len() {
            return None;
        }
        let mut p = (start + target).min(b.len());
        let cut = loop {
            if p >= b.len() {
                break b.len();
            }
            let letter = |i: usize| b.get(i).is_some_and(|c| c.is_ascii_alphabetic());
            let space_between = b[p] == b' ' && p > 0 && letter(p - 1) && letter(p + 1);
            // No alternative of the pattern matches a newline followed by a character
            // that is not whitespace, so a piece always begins right there.
            let after_newline = p > 0
                && b[p - 1] == b'\n'
                && text.is_char_boundary(p)
                && text[p..].chars().next().is_some_and(|c| !c.is_whitespace());
            if space_between || after_newline {
                break p;
            }
            p += 1;
        };
        let chunk = &text[start..cut];
        start = cut;
        Some(chunk)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_chunks_cover_the_text() {
        let t = "abc def\nghi  jkl 12 34 mno";
        let joined: String = safe_chunks(t, 3).collect();
        assert_eq!(joined, t);
        assert!(safe_chunks(t, 3).count() > 2);
        assert_eq!(safe_chunks("", 3).count(), 0);
    }
}
