//! Reading a Hugging Face `tokenizer.json` (chapter 4, source S0 5.3): the vocabulary as
//! strings in GPT-2's byte-to-unicode alphabet, the ordered list of merges
//! ([`MergeRule::Pairs`]), the added tokens, the normalizer and the pre-tokenizer's split
//! pattern.

use super::pretokenize::{SplitBehavior, SplitRule};
use super::special::AddedToken;
use super::vocab::{MergeRule, Vocab};
use crate::error::{Error, Result, excerpt, excerpt_json};
use rustc_hash::FxHashMap;
use serde_json::Value;

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
    pub added: Vec<AddedToken>,
    /// The pre-tokenizer's split pattern.
    pub pattern: String,
    /// Its behaviour and `invert` flag.
    pub split: SplitRule,
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
    let model = doc
        .get("model")
        .ok_or_else(|| Error::field(what, "model", "missing"))?;
    check_bpe_model(model, what)?;
    let ignore_merges = model
        .get("ignore_merges")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (entries, by_string) = vocab_entries(model, what)?;
    let pairs = merge_pairs(model, &by_string, what)?;
    let vocab = Vocab::new(entries, MergeRule::Pairs(pairs), ignore_merges, what)?;
    let added = added_tokens(doc, what)?;
    let nfc = normalizer_is_nfc(doc, what)?;
    let (pattern, split) =
        pre_tokenizer_pattern(doc.get("pre_tokenizer").unwrap_or(&Value::Null), what)?;
    Ok(HfParts {
        vocab,
        added,
        pattern,
        split,
        nfc,
    })
}

/// `model` must be plain BPE: no dropout, no unknown-token fallback or word affixes.
fn check_bpe_model(model: &Value, what: &str) -> Result<()> {
    let field = |f: &str, p: String| Error::field(what, f, p);
    match model.get("type").and_then(Value::as_str) {
        Some("BPE") | None => {}
        other => {
            return Err(field(
                "model.type",
                format!(
                    "only BPE is supported, got {}",
                    other.map_or("none".into(), excerpt)
                ),
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
                format!("{} is not supported", excerpt(s)),
            ));
        }
    }
    Ok(())
}

/// A vocabulary's `(bytes, id)` pairs, and each token string's id.
type Entries<'a> = (Vec<(Vec<u8>, u32)>, FxHashMap<&'a str, u32>);

/// `model.vocab` as `(bytes, id)` pairs, and each token string's id.
fn vocab_entries<'a>(model: &'a Value, what: &str) -> Result<Entries<'a>> {
    let field = |f: &str, p: String| Error::field(what, f, p);
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
            .ok_or_else(|| {
                field(
                    "model.vocab",
                    format!("{}: id {} is not a valid id", excerpt(s), excerpt_json(id)),
                )
            })? as u32;
        let bytes = unicode_to_bytes(s, &inverse).ok_or_else(|| {
            field(
                "model.vocab",
                format!("{} is not in the byte-level alphabet", excerpt(s)),
            )
        })?;
        by_string.insert(s.as_str(), id);
        entries.push((bytes, id));
    }

    Ok((entries, by_string))
}

/// `model.merges` (strings `"left right"` or pairs) as `(left, right) → (rank, merged)`.
fn merge_pairs(
    model: &Value,
    by_string: &FxHashMap<&str, u32>,
    what: &str,
) -> Result<FxHashMap<(u32, u32), (u32, u32)>> {
    let field = |f: &str, p: String| Error::field(what, f, p);
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
                            format!("merge {rank}: {} is not `left right`", excerpt(s)),
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
                    format!("merge {rank}: {} is not in the vocabulary", excerpt(t)),
                )
            })
        };
        let (li, ri) = (get(l)?, get(r)?);
        let joined = format!("{l}{r}");
        let merged = get(&joined)?;
        // The first occurrence of a pair wins, as in Hugging Face's loader.
        pairs.entry((li, ri)).or_insert((rank as u32, merged));
    }
    Ok(pairs)
}

/// `added_tokens` (no lstrip / rstrip / single_word).
fn added_tokens(doc: &Value, what: &str) -> Result<Vec<AddedToken>> {
    let field = |f: &str, p: String| Error::field(what, f, p);
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
            added.push(AddedToken {
                content: content.to_string(),
                id,
                special,
            });
        }
    }

    Ok(added)
}

/// Whether the normalizer is NFC (the only one supported) or absent.
fn normalizer_is_nfc(doc: &Value, what: &str) -> Result<bool> {
    let field = |f: &str, p: String| Error::field(what, f, p);
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
                            format!(
                                "only NFC is supported, got {}",
                                other.map_or("none".into(), excerpt)
                            ),
                        ));
                    }
                }
            }
            nfc
        }
    };

    Ok(nfc)
}

/// The split pattern and rule of a `Split` + `ByteLevel` (or a lone `ByteLevel`, whose
/// GPT-2 pattern splits the Isolated way) pre-tokenizer.
fn pre_tokenizer_pattern(pre: &Value, what: &str) -> Result<(String, SplitRule)> {
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
    let mut rule = SplitRule::default();
    let mut byte_level = false;
    for p in list {
        match p.get("type").and_then(Value::as_str) {
            Some("Split") => {
                let pat = p.get("pattern");
                // A string pattern matches itself literally (`tokenizers` escapes it).
                let regex = match (
                    pat.and_then(|v| v.get("Regex")).and_then(Value::as_str),
                    pat.and_then(|v| v.get("String")).and_then(Value::as_str),
                ) {
                    (Some(r), _) => r.to_string(),
                    (None, Some(s)) if !s.is_empty() => fancy_regex::escape(s).into_owned(),
                    _ => {
                        return Err(field(
                            "Split: the pattern must be {\"Regex\": ...} or a non-empty {\"String\": ...}"
                                .into(),
                        ));
                    }
                };
                let name = p.get("behavior").and_then(Value::as_str).unwrap_or("");
                let behavior = SplitBehavior::parse(name).ok_or_else(|| {
                    field(format!(
                        "Split: unknown behavior {} (Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous)",
                        excerpt(name)
                    ))
                })?;
                if pattern.is_some() {
                    return Err(field("more than one Split step is not supported".into()));
                }
                let invert = p.get("invert").and_then(Value::as_bool).unwrap_or(false);
                rule = SplitRule { behavior, invert };
                pattern = Some(regex);
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
            other => {
                return Err(field(format!(
                    "unsupported pre-tokenizer {}",
                    other.map_or("none".into(), excerpt)
                )));
            }
        }
    }
    if !byte_level {
        return Err(field(
            "no ByteLevel step (only byte-level BPE is supported)".into(),
        ));
    }
    let pattern = pattern.ok_or_else(|| field("no split pattern".into()))?;
    Ok((pattern, rule))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_to_unicode_is_a_bijection() {
        let m = bytes_to_unicode();
        let set: std::collections::HashSet<char> = m.iter().copied().collect();
        assert_eq!(set.len(), 256);
        assert_eq!(m[b' ' as usize], 'Ġ');
        assert_eq!(m[b'\n' as usize], 'Ċ');
        assert_eq!(m[b'A' as usize], 'A');
    }
}
