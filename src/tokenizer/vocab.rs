//! Vocabularies and their two file formats.
//!
//! A byte-level BPE vocabulary maps byte strings to ids. tiktoken files list one token per
//! line as `base64(bytes) rank`, and the rank is both the id and the merge priority: two
//! adjacent parts may merge when their concatenation is a token, lower rank first.
//! Hugging Face `tokenizer.json` files store the vocabulary as strings in GPT-2's
//! byte-to-unicode alphabet plus an explicit, ordered list of merges; a pair merges only
//! if it is in that list. [`MergeRule`] keeps the two apart so each file is encoded exactly
//! as its own library encodes it.

use crate::error::{Error, Result};
use base64::Engine;
use rustc_hash::FxHashMap;
use serde_json::Value;

/// The largest id (rank) a vocabulary may use.
pub const MAX_ID: u32 = (1 << 24) - 1;

/// How the merge loop ranks two adjacent parts.
#[derive(Clone, Debug)]
pub enum MergeRule {
    /// tiktoken: the pair's rank is the rank (= id) of the concatenated bytes.
    ByteRank,
    /// Hugging Face: `(left id, right id) → (merge index, merged id)`.
    Pairs(FxHashMap<(u32, u32), (u32, u32)>),
}

/// A byte-level BPE vocabulary.
#[derive(Clone, Debug)]
pub struct Vocab {
    /// id → bytes (`None` where the id is unused).
    tokens: Vec<Option<Box<[u8]>>>,
    /// bytes → id.
    ids: FxHashMap<Box<[u8]>, u32>,
    /// The id of each single byte.
    byte_ids: [u32; 256],
    pub merges: MergeRule,
    /// Look a whole pre-token piece up before merging (tiktoken always does;
    /// Hugging Face does when `ignore_merges` is set).
    pub whole_piece_first: bool,
}

impl Vocab {
    /// Builds a vocabulary from `(bytes, id)` pairs. Every one of the 256 single bytes must
    /// be a token (byte-level BPE encodes any input through them); ids and byte strings
    /// must be unique.
    pub fn new(
        entries: Vec<(Vec<u8>, u32)>,
        merges: MergeRule,
        whole_piece_first: bool,
        what: &str,
    ) -> Result<Self> {
        if entries.is_empty() {
            return Err(Error::field(what, "vocabulary", "no tokens"));
        }
        let max = entries.iter().map(|e| e.1).max().unwrap_or(0) as usize;
        // Ids index a table: refuse absurd ones instead of allocating gigabytes.
        if max > MAX_ID as usize {
            return Err(Error::field(
                what,
                format!("id {max}"),
                format!(
                    "ids above {MAX_ID} are not supported (real vocabularies have a few hundred thousand)"
                ),
            ));
        }
        let mut tokens: Vec<Option<Box<[u8]>>> = vec![None; max + 1];
        let mut ids = FxHashMap::with_capacity_and_hasher(entries.len(), Default::default());
        for (bytes, id) in entries {
            if bytes.is_empty() {
                return Err(Error::field(what, format!("id {id}"), "empty token"));
            }
            if let Some(prev) = &tokens[id as usize] {
                return Err(Error::field(
                    what,
                    format!("id {id}"),
                    format!("duplicate id: {:?} and {:?}", show(prev), show(&bytes)),
                ));
            }
            let bytes: Box<[u8]> = bytes.into_boxed_slice();
            if let Some(prev) = ids.insert(bytes.clone(), id) {
                return Err(Error::field(
                    what,
                    format!("id {id}"),
                    format!("token {:?} also has id {prev}", show(&bytes)),
                ));
            }
            tokens[id as usize] = Some(bytes);
        }
        let mut byte_ids = [0u32; 256];
        for b in 0..=255u8 {
            byte_ids[b as usize] = *ids.get(&[b][..]).ok_or_else(|| {
                Error::field(
                    what,
                    "vocabulary",
                    format!("the single byte 0x{b:02x} is not a token"),
                )
            })?;
        }
        Ok(Self {
            tokens,
            ids,
            byte_ids,
            merges,
            whole_piece_first,
        })
    }

    /// Number of id slots (the highest id plus one).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Never true: a vocabulary holds at least the 256 bytes.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Number of tokens (ids in use).
    pub fn n_tokens(&self) -> usize {
        self.ids.len()
    }

    /// The bytes of token `id`.
    pub fn token(&self, id: u32) -> Option<&[u8]> {
        self.tokens.get(id as usize).and_then(|t| t.as_deref())
    }

    /// The id of exactly these bytes.
    #[inline]
    pub fn id(&self, bytes: &[u8]) -> Option<u32> {
        self.ids.get(bytes).copied()
    }

    /// The id of a single byte.
    #[inline]
    pub fn byte_id(&self, b: u8) -> u32 {
        self.byte_ids[b as usize]
    }

    /// The rank and resulting id of merging two adjacent parts (`joined` is their bytes,
    /// `left`/`right` their ids), or `None` if they do not merge.
    #[inline]
    pub fn pair(&self, left: u32, right: u32, joined: &[u8]) -> Option<(u32, u32)> {
        match &self.merges {
            MergeRule::ByteRank => self.id(joined).map(|id| (id, id)),
            MergeRule::Pairs(m) => m.get(&(left, right)).copied(),
        }
    }

    /// Every `(id, bytes)`, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.tokens
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_deref().map(|b| (i as u32, b)))
    }
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ANCHOR: tiktoken_loader
/// Parses a tiktoken vocabulary: one `base64(bytes) rank` per line, blank lines ignored.
/// `what` names the file in errors.
pub fn parse_tiktoken(text: &[u8], what: &str) -> Result<Vocab> {
    let text = std::str::from_utf8(text)
        .map_err(|e| Error::field(what, "contents", format!("not UTF-8 text: {e}")))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = || format!("line {}", n + 1);
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split(' ');
        let (Some(token), Some(rank), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(Error::field(
                what,
                at(),
                format!("expected `base64 rank`, got {line:?}"),
            ));
        };
        let bytes = b64
            .decode(token)
            .map_err(|e| Error::field(what, at(), format!("invalid base64 {token:?}: {e}")))?;
        let rank: u32 = rank.parse().map_err(|_| {
            Error::field(
                what,
                at(),
                format!("rank {rank:?} is not a non-negative integer"),
            )
        })?;
        entries.push((bytes, rank));
    }
    Vocab::new(entries, MergeRule::ByteRank, true, what)
}
// ANCHOR_END: tiktoken_loader

/// GPT-2's reversible map from bytes to printable characters, used by Hugging Face's
/// ByteLevel pre-tokenizer to store byte strings as text: printable Latin-1 bytes map to
/// themselves, the other 68 bytes to U+0100, U+0101, … in byte order.
pub fn bytes_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u32 {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        map[b as usize] = if printable {
            char::from_u32(b).unwrap_or('\0')
        } else {
            let c = char::from_u32(next).unwrap_or('\0');
            next += 1;
            c
        };
    }
    map
}

/// The inverse of [`bytes_to_unicode`], applied to a whole token string.
fn unicode_to_bytes(s: &str, inverse: &FxHashMap<char, u8>) -> Option<Vec<u8>> {
    s.chars().map(|c| inverse.get(&c).copied()).collect()
}

/// What a Hugging Face `tokenizer.json` defines beyond the vocabulary.
#[derive(Clone, Debug)]
pub struct HfParts {
    pub vocab: Vocab,
    pub added: Vec<super::special::AddedToken>,
    /// The pre-tokenizer's split pattern.
    pub pattern: String,
    /// Whether the normalizer is NFC.
    pub nfc: bool,
}

/// GPT-2's pattern, used by a ByteLevel pre-tokenizer with `use_regex: true`.
pub const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Parses a Hugging Face `tokenizer.json` with a byte-level BPE model. Supported: model
/// `BPE` (no dropout, no byte fallback, no word prefix/suffix), normalizer `null` or `NFC`,
/// pre-tokenizer `Split` (regex, `Isolated`) followed by `ByteLevel`, or `ByteLevel` alone.
/// Anything else is refused with an error naming the field.
pub fn parse_tokenizer_json(doc: &Value, what: &str) -> Result<HfParts> {
    let field = |f: &str, p: String| Error::field(what, f, p);
    let model = doc
        .get("model")
        .ok_or_else(|| field("model", "missing".into()))?;
    match model.get("type").and_then(Value::as_str) {
        Some("BPE") | None => {}
        other => {
            return Err(field(
                "model.type",
                format!("only BPE is supported, got {other:?}"),
            ));
        }
    }
    if !model.get("dropout").unwrap_or(&Value::Null).is_null() {
        return Err(field(
            "model.dropout",
            "BPE dropout is not supported".into(),
        ));
    }
    if model.get("byte_fallback").and_then(Value::as_bool) == Some(true) {
        return Err(field(
            "model.byte_fallback",
            "byte fallback is not supported (byte-level BPE only)".into(),
        ));
    }
    for f in ["continuing_subword_prefix", "end_of_word_suffix"] {
        if let Some(s) = model.get(f).and_then(Value::as_str)
            && !s.is_empty()
        {
            return Err(field(
                &format!("model.{f}"),
                format!("{s:?} is not supported"),
            ));
        }
    }
    let ignore_merges = model
        .get("ignore_merges")
        .and_then(Value::as_bool)
        .unwrap_or(false);

    let b2u = bytes_to_unicode();
    let inverse: FxHashMap<char, u8> = b2u.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
    let vocab_obj = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| field("model.vocab", "missing or not an object".into()))?;
    let mut entries = Vec::with_capacity(vocab_obj.len());
    let mut by_string: FxHashMap<&str, u32> = FxHashMap::default();
    for (s, id) in vocab_obj {
        let id = id
            .as_u64()
            .filter(|&i| i < u32::MAX as u64)
            .ok_or_else(|| field("model.vocab", format!("{s:?}: id {id} is not a valid id")))?
            as u32;
        let bytes = unicode_to_bytes(s, &inverse).ok_or_else(|| {
            field(
                "model.vocab",
                format!("{s:?} is not in the byte-level alphabet"),
            )
        })?;
        by_string.insert(s.as_str(), id);
        entries.push((bytes, id));
    }

    let merges_v = model
        .get("merges")
        .and_then(Value::as_array)
        .ok_or_else(|| field("model.merges", "missing or not an array".into()))?;
    let mut pairs = FxHashMap::with_capacity_and_hasher(merges_v.len(), Default::default());
    for (rank, m) in merges_v.iter().enumerate() {
        let (l, r) = match m {
            Value::String(s) => {
                let mut it = s.split(' ');
                match (it.next(), it.next(), it.next()) {
                    (Some(l), Some(r), None) => (l, r),
                    _ => {
                        return Err(field(
                            "model.merges",
                            format!("merge {rank}: {s:?} is not `left right`"),
                        ));
                    }
                }
            }
            Value::Array(a) if a.len() == 2 && a[0].is_string() && a[1].is_string() => {
                (a[0].as_str().unwrap_or(""), a[1].as_str().unwrap_or(""))
            }
            _ => {
                return Err(field(
                    "model.merges",
                    format!("merge {rank}: expected a string or a pair"),
                ));
            }
        };
        let get = |t: &str| {
            by_string.get(t).copied().ok_or_else(|| {
                field(
                    "model.merges",
                    format!("merge {rank}: {t:?} is not in the vocabulary"),
                )
            })
        };
        let (li, ri) = (get(l)?, get(r)?);
        let joined = format!("{l}{r}");
        let merged = get(&joined)?;
        // The first occurrence of a pair wins, as in Hugging Face's loader.
        pairs.entry((li, ri)).or_insert((rank as u32, merged));
    }
    let vocab = Vocab::new(entries, MergeRule::Pairs(pairs), ignore_merges, what)?;

    let mut added = Vec::new();
    if let Some(list) = doc.get("added_tokens").and_then(Value::as_array) {
        for (i, t) in list.iter().enumerate() {
            let f = format!("added_tokens[{i}]");
            let content = t
                .get("content")
                .and_then(Value::as_str)
                .ok_or_else(|| field(&f, "missing content".into()))?;
            let id = t
                .get("id")
                .and_then(Value::as_u64)
                .filter(|&i| i < u32::MAX as u64)
                .ok_or_else(|| field(&f, "missing or invalid id".into()))?
                as u32;
            for flag in ["lstrip", "rstrip", "single_word"] {
                if t.get(flag).and_then(Value::as_bool) == Some(true) {
                    return Err(field(
                        &format!("{f}.{flag}"),
                        "only false is supported".into(),
                    ));
                }
            }
            let special = t.get("special").and_then(Value::as_bool).unwrap_or(false);
            added.push(super::special::AddedToken {
                content: content.to_string(),
                id,
                special,
            });
        }
    }

    let nfc = match doc.get("normalizer").unwrap_or(&Value::Null) {
        Value::Null => false,
        n => {
            let list: Vec<&Value> = match n.get("type").and_then(Value::as_str) {
                Some("Sequence") => n
                    .get("normalizers")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().collect())
                    .unwrap_or_default(),
                _ => vec![n],
            };
            let mut nfc = false;
            for n in list {
                match n.get("type").and_then(Value::as_str) {
                    Some("NFC") => nfc = true,
                    other => {
                        return Err(field(
                            "normalizer",
                            format!("only NFC is supported, got {other:?}"),
                        ));
                    }
                }
            }
            nfc
        }
    };

    let pattern = pre_tokenizer_pattern(doc.get("pre_tokenizer").unwrap_or(&Value::Null), what)?;
    Ok(HfParts {
        vocab,
        added,
        pattern,
        nfc,
    })
}

/// The split pattern of a `Split` + `ByteLevel` (or a lone `ByteLevel`) pre-tokenizer.
fn pre_tokenizer_pattern(pre: &Value, what: &str) -> Result<String> {
    let field = |p: String| Error::field(what, "pre_tokenizer", p);
    let list: Vec<&Value> = match pre.get("type").and_then(Value::as_str) {
        Some("Sequence") => pre
            .get("pretokenizers")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default(),
        Some(_) => vec![pre],
        None => {
            return Err(field(
                "missing (a byte-level BPE needs a ByteLevel pre-tokenizer)".into(),
            ));
        }
    };
    let mut pattern = None;
    let mut byte_level = false;
    for p in list {
        match p.get("type").and_then(Value::as_str) {
            Some("Split") => {
                let pat = p.get("pattern");
                let regex = pat
                    .and_then(|v| v.get("Regex"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| field("Split: only a Regex pattern is supported".into()))?;
                let behavior = p.get("behavior").and_then(Value::as_str);
                if behavior != Some("Isolated")
                    || p.get("invert").and_then(Value::as_bool) == Some(true)
                {
                    return Err(field(format!(
                        "Split: only behavior Isolated without invert is supported, got {behavior:?}"
                    )));
                }
                pattern = Some(regex.to_string());
            }
            Some("ByteLevel") => {
                if p.get("add_prefix_space").and_then(Value::as_bool) == Some(true) {
                    return Err(field("ByteLevel: add_prefix_space is not supported".into()));
                }
                if p.get("use_regex").and_then(Value::as_bool).unwrap_or(true) {
                    if pattern.is_some() {
                        return Err(field(
                            "ByteLevel with use_regex after a Split is not supported".into(),
                        ));
                    }
                    pattern = Some(GPT2_PATTERN.to_string());
                }
                byte_level = true;
            }
            other => return Err(field(format!("unsupported pre-tokenizer {other:?}"))),
        }
    }
    if !byte_level {
        return Err(field(
            "no ByteLevel step (only byte-level BPE is supported)".into(),
        ));
    }
    pattern.ok_or_else(|| field("no split pattern".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(bytes: &[u8], rank: u32) -> String {
        format!(
            "{} {rank}\n",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    }

    fn all_bytes() -> String {
        (0..=255u8).map(|b| line(&[b], b as u32)).collect()
    }

    #[test]
    fn byte_to_unicode_is_a_bijection() {
        let m = bytes_to_unicode();
        let set: std::collections::HashSet<char> = m.iter().copied().collect();
        assert_eq!(set.len(), 256);
        assert_eq!(m[b' ' as usize], 'Ġ');
        assert_eq!(m[b'\n' as usize], 'Ċ');
        assert_eq!(m[b'A' as usize], 'A');
    }

    #[test]
    fn tiktoken_ok_and_bad_lines() {
        let good = all_bytes() + &line(b"ab", 256) + "\n";
        let v = parse_tiktoken(good.as_bytes(), "t").unwrap();
        assert_eq!(v.n_tokens(), 257);
        assert_eq!(v.id(b"ab"), Some(256));
        let err = |s: String| parse_tiktoken(s.as_bytes(), "t").unwrap_err().to_string();
        assert!(err(all_bytes() + "YWI=\n").contains("line 257"));
        assert!(err(all_bytes() + "YWI= x\n").contains("not a non-negative integer"));
        assert!(err(all_bytes() + "@@@ 300\n").contains("invalid base64"));
        assert!(err(all_bytes() + &line(b"ab", 5)).contains("duplicate id"));
        assert!(err(all_bytes() + &line(b"a", 300)).contains("also has id"));
        assert!(err(line(b"a", 0)).contains("0x00 is not a token"));
        assert!(err(String::new()).contains("no tokens"));
        assert!(
            parse_tiktoken(&[0xff, 0xfe], "t")
                .unwrap_err()
                .to_string()
                .contains("not UTF-8")
        );
    }
}
