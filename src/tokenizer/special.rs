//! Special and added tokens (source 5.3.1): strings such as `<|im_start|>` that the
//! tokenizer maps straight to one id, before and outside byte-level BPE.
//!
//! Qwen3's list comes from its published `tokenizer_config.json` (`added_tokens_decoder`,
//! ids 151643–151668). Thirteen are flagged `special` (`<|endoftext|>`, the ChatML markers,
//! the vision markers); the rest (`<tool_call>`, the FIM markers, `<think>` …) are plain
//! added tokens. Both kinds are matched in the input text and never split; the flag only
//! matters to a decoder asked to skip special tokens.

use crate::error::{Error, Result};

/// One added token: its text, its id, and whether Hugging Face flags it `special`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedToken {
    pub content: String,
    pub id: u32,
    pub special: bool,
}

/// Qwen3's added tokens (`tokenizer_config.json`, `added_tokens_decoder`), in id order.
/// The first 22 are Qwen2.5's list as well; 151665–151668 are new in Qwen3.
pub const QWEN3_ADDED_TOKENS: &[(&str, u32, bool)] = &[
    ("<|endoftext|>", 151643, true),
    ("<|im_start|>", 151644, true),
    ("<|im_end|>", 151645, true),
    ("<|object_ref_start|>", 151646, true),
    ("<|object_ref_end|>", 151647, true),
    ("<|box_start|>", 151648, true),
    ("<|box_end|>", 151649, true),
    ("<|quad_start|>", 151650, true),
    ("<|quad_end|>", 151651, true),
    ("<|vision_start|>", 151652, true),
    ("<|vision_end|>", 151653, true),
    ("<|vision_pad|>", 151654, true),
    ("<|image_pad|>", 151655, true),
    ("<|video_pad|>", 151656, true),
    ("<tool_call>", 151657, false),
    ("</tool_call>", 151658, false),
    ("<|fim_prefix|>", 151659, false),
    ("<|fim_middle|>", 151660, false),
    ("<|fim_suffix|>", 151661, false),
    ("<|fim_pad|>", 151662, false),
    ("<|repo_name|>", 151663, false),
    ("<|file_sep|>", 151664, false),
    ("<tool_response>", 151665, false),
    ("</tool_response>", 151666, false),
    ("<think>", 151667, false),
    ("</think>", 151668, false),
];

/// Qwen3's added tokens as [`AddedToken`]s.
pub fn qwen3_added_tokens() -> Vec<AddedToken> {
    QWEN3_ADDED_TOKENS
        .iter()
        .map(|&(content, id, special)| AddedToken {
            content: content.to_string(),
            id,
            special,
        })
        .collect()
}

/// A piece of input text: ordinary text for BPE, or one added token's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment<'a> {
    Text(&'a str),
    Added(u32),
}

/// The set of added tokens, ready to find them in text.
#[derive(Clone, Debug, Default)]
pub struct AddedTokens {
    /// Longest first, so that the longest token wins at a position.
    by_length: Vec<AddedToken>,
    /// `starts[b]`: some token begins with byte `b` (a cheap pre-filter for the scan).
    starts: Vec<bool>,
}

impl AddedTokens {
    /// Checks the list (no empty or duplicate content, no duplicate id) and indexes it.
    pub fn new(tokens: Vec<AddedToken>, what: &str) -> Result<Self> {
        let mut starts = vec![false; 256];
        for (i, t) in tokens.iter().enumerate() {
            if t.id > super::vocab::MAX_ID {
                return Err(Error::field(
                    what,
                    "added_tokens",
                    format!(
                        "{:?} has id {}, above the supported {}",
                        t.content,
                        t.id,
                        super::vocab::MAX_ID
                    ),
                ));
            }
            if t.content.is_empty() {
                return Err(Error::field(
                    what,
                    "added_tokens",
                    format!("token id {} has empty content", t.id),
                ));
            }
            if let Some(other) = tokens[..i]
                .iter()
                .find(|o| o.content == t.content || o.id == t.id)
            {
                return Err(Error::field(
                    what,
                    "added_tokens",
                    format!(
                        "duplicate added token: {:?} (id {}) and {:?} (id {})",
                        other.content, other.id, t.content, t.id
                    ),
                ));
            }
            starts[t.content.as_bytes()[0] as usize] = true;
        }
        let mut by_length = tokens;
        by_length.sort_by(|a, b| b.content.len().cmp(&a.content.len()).then(a.id.cmp(&b.id)));
        Ok(Self { by_length, starts })
    }

    pub fn is_empty(&self) -> bool {
        self.by_length.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_length.len()
    }

    /// The tokens in id order.
    pub fn tokens(&self) -> Vec<&AddedToken> {
        let mut v: Vec<&AddedToken> = self.by_length.iter().collect();
        v.sort_by_key(|t| t.id);
        v
    }

    /// The added token with this id.
    pub fn get(&self, id: u32) -> Option<&AddedToken> {
        self.by_length.iter().find(|t| t.id == id)
    }

    /// The id of exactly this content, if it is an added token.
    pub fn id_of(&self, content: &str) -> Option<u32> {
        self.by_length
            .iter()
            .find(|t| t.content == content)
            .map(|t| t.id)
    }

    /// Highest id among the added tokens.
    pub fn max_id(&self) -> Option<u32> {
        self.by_length.iter().map(|t| t.id).max()
    }

    /// The added token starting exactly at byte `pos`, longest first.
    fn match_at(&self, text: &str, pos: usize) -> Option<&AddedToken> {
        let rest = &text.as_bytes()[pos..];
        self.by_length
            .iter()
            .find(|t| rest.starts_with(t.content.as_bytes()))
    }

    /// Splits `text` into ordinary text and added tokens, leftmost first. Empty text
    /// segments are left out.
    pub fn split<'a>(&self, text: &'a str) -> Vec<Segment<'a>> {
        let mut out = Vec::new();
        let bytes = text.as_bytes();
        let (mut start, mut pos) = (0usize, 0usize);
        while pos < bytes.len() {
            if self.starts[bytes[pos] as usize]
                && let Some(t) = self.match_at(text, pos)
            {
                if start < pos {
                    out.push(Segment::Text(&text[start..pos]));
                }
                out.push(Segment::Added(t.id));
                pos += t.content.len();
                start = pos;
                continue;
            }
            pos += 1;
        }
        if start < bytes.len() {
            out.push(Segment::Text(&text[start..]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_list_is_contiguous() {
        for (i, (_, id, _)) in QWEN3_ADDED_TOKENS.iter().enumerate() {
            assert_eq!(*id, 151643 + i as u32);
        }
    }

    #[test]
    fn split_finds_tokens_and_near_misses_stay_text() {
        let a = AddedTokens::new(qwen3_added_tokens(), "test").unwrap();
        let s = a.split("<|im_start|>user\nhi<|im_end|><|im_start|<think>");
        assert_eq!(
            s,
            vec![
                Segment::Added(151644),
                Segment::Text("user\nhi"),
                Segment::Added(151645),
                Segment::Text("<|im_start|"),
                Segment::Added(151667)
            ]
        );
        assert!(a.split("").is_empty());
    }

    #[test]
    fn duplicates_are_rejected() {
        let t = |c: &str, id| AddedToken {
            content: c.into(),
            id,
            special: true,
        };
        assert!(AddedTokens::new(vec![t("<a>", 1), t("<a>", 2)], "x").is_err());
        assert!(AddedTokens::new(vec![t("<a>", 1), t("<b>", 1)], "x").is_err());
        assert!(AddedTokens::new(vec![t("", 1)], "x").is_err());
    }
}
