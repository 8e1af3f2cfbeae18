//! Special and added tokens (source 5.3.1): strings such as `<|im_start|>` that the
//! tokenizer maps straight to one id, before and outside byte-level BPE.
//!
//! Qwen3's list comes from its published `tokenizer_config.json` (`added_tokens_decoder`,
//! ids 151643–151668). Fourteen are flagged `special` (`<|endoftext|>`, the ChatML markers,
//! the vision markers); the rest (`<tool_call>`, the FIM markers, `<think>` …) are plain
//! added tokens. Both kinds are matched in the input text and never split; the flag only
//! matters to a decoder asked to skip special tokens.

use crate::error::{Error, Result, excerpt};
use aho_corasick::{AhoCorasick, Input, MatchKind};
use rustc_hash::FxHashMap;

/// One added token: its text, its id, and whether Hugging Face flags it `special`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedToken {
    pub content: String,
    pub id: u32,
    pub special: bool,
}

// ANCHOR: qwen3_added
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
// ANCHOR_END: qwen3_added

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
    /// Longest first (ties by id), so that the longest token wins at a position.
    by_length: Vec<AddedToken>,
    /// Index into `by_length` of each id and each content.
    by_id: FxHashMap<u32, usize>,
    by_content: FxHashMap<String, usize>,
    /// How many tokens at the front of `by_length` are longer than [`AUTOMATON_BYTES`]:
    /// those are found by substring search instead of the automaton.
    n_long: usize,
    /// Finds the other tokens in one pass over the text, leftmost first and the longest
    /// at a position (what Hugging Face's added-vocabulary matcher does): `O(text)`
    /// whatever the number of tokens. `None` when there are none.
    matcher: Option<AhoCorasick>,
}

/// Tokens up to this length go into the automaton. Its construction follows failure
/// links as deep as a token is long, so one 100 KB token would take minutes; real added
/// tokens are a few dozen bytes, and longer ones are searched for one by one (two-way
/// search, linear in the text).
const AUTOMATON_BYTES: usize = 256;

impl AddedTokens {
    /// Checks the list (no empty or duplicate content, no duplicate id) and indexes it, in
    /// time linear in its length (200 000 added tokens load at once).
    pub fn new(tokens: Vec<AddedToken>, what: &str) -> Result<Self> {
        let mut by_id: FxHashMap<u32, usize> = FxHashMap::default();
        let mut by_content: FxHashMap<&str, usize> = FxHashMap::default();
        for (i, t) in tokens.iter().enumerate() {
            if t.id > super::vocab::MAX_ID {
                return Err(Error::field(
                    what,
                    "added_tokens",
                    format!(
                        "{} has id {}, above the supported {}",
                        excerpt(&t.content),
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
            // The first earlier token with the same content or id (the list's order).
            let earlier = [by_content.get(t.content.as_str()), by_id.get(&t.id)];
            if let Some(&o) = earlier.into_iter().flatten().min() {
                return Err(duplicate(what, &tokens[o], t));
            }
            by_content.insert(&t.content, i);
            by_id.insert(t.id, i);
        }
        let mut by_length = tokens;
        by_length.sort_by(|a, b| b.content.len().cmp(&a.content.len()).then(a.id.cmp(&b.id)));
        let by_id = by_length
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id, i))
            .collect();
        let by_content = by_length
            .iter()
            .enumerate()
            .map(|(i, t)| (t.content.clone(), i))
            .collect();
        let n_long = by_length
            .iter()
            .take_while(|t| t.content.len() > AUTOMATON_BYTES)
            .count();
        let matcher = if by_length.len() == n_long {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(by_length[n_long..].iter().map(|t| t.content.as_bytes()))
                    .map_err(|e| {
                        Error::field(what, "added_tokens", format!("cannot index them: {e}"))
                    })?,
            )
        };
        Ok(Self {
            by_length,
            by_id,
            by_content,
            n_long,
            matcher,
        })
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
        self.by_id.get(&id).map(|&i| &self.by_length[i])
    }

    /// The id of exactly this content, if it is an added token.
    pub fn id_of(&self, content: &str) -> Option<u32> {
        self.by_content.get(content).map(|&i| self.by_length[i].id)
    }

    /// Highest id among the added tokens.
    pub fn max_id(&self) -> Option<u32> {
        self.by_length.iter().map(|t| t.id).max()
    }

    /// Splits `text` into ordinary text and added tokens, leftmost first (the longest
    /// token at a position wins). Empty text segments are left out.
    pub fn split<'a>(&self, text: &'a str) -> Vec<Segment<'a>> {
        let mut out = Vec::new();
        let mut start = 0usize;
        // The next hit at or after `start` of the automaton and of each long token, kept
        // between turns so that no stretch of text is searched twice for the same thing.
        // `None` once there is no hit left.
        let mut short: Option<(usize, usize, usize)> = None;
        let mut short_searched = false;
        let mut long: Vec<Option<usize>> = self.by_length[..self.n_long]
            .iter()
            .map(|t| text.find(t.content.as_str()))
            .collect();
        loop {
            if let Some(m) = &self.matcher
                && (!short_searched || short.is_some_and(|(s, _, _)| s < start))
            {
                short_searched = true;
                short = m
                    .find(Input::new(text).span(start..text.len()))
                    .map(|h| (h.start(), h.end(), self.n_long + h.pattern().as_usize()));
            }
            let mut best = short.filter(|h| h.0 >= start);
            for (i, next) in long.iter_mut().enumerate() {
                let content = self.by_length[i].content.as_str();
                if next.is_some_and(|p| p < start) {
                    *next = text[start..].find(content).map(|p| p + start);
                }
                // Long tokens come first in `by_length`, longest first: a tie keeps the
                // earlier (longer) one.
                if let Some(p) = *next
                    && best.is_none_or(|b| p < b.0 || (p == b.0 && i < b.2))
                {
                    best = Some((p, p + content.len(), i));
                }
            }
            let Some((s, e, i)) = best else { break };
            if start < s {
                out.push(Segment::Text(&text[start..s]));
            }
            out.push(Segment::Added(self.by_length[i].id));
            start = e;
        }
        if start < text.len() {
            out.push(Segment::Text(&text[start..]));
        }
        out
    }
}

fn duplicate(what: &str, first: &AddedToken, again: &AddedToken) -> Error {
    Error::field(
        what,
        "added_tokens",
        format!(
            "duplicate added token: {} (id {}) and {} (id {})",
            excerpt(&first.content),
            first.id,
            excerpt(&again.content),
            again.id
        ),
    )
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

#[cfg(test)]
mod long_token_tests {
    use super::*;

    /// Building the matcher is linear in the tokens' total length: a 200 KB added token
    /// (a hostile vocabulary) indexes well within a second's budget.
    #[test]
    fn a_long_added_token_indexes_quickly() {
        let long: String = (0..200_000)
            .map(|i| (b'a' + (i % 7) as u8) as char)
            .collect();
        let tokens = vec![
            AddedToken {
                content: long.clone(),
                id: 1,
                special: true,
            },
            AddedToken {
                content: "<s>".into(),
                id: 2,
                special: true,
            },
        ];
        let t0 = std::time::Instant::now();
        let added = AddedTokens::new(tokens, "long").unwrap();
        let built = t0.elapsed();
        let text = format!("x<s>{long}y");
        let segments = added.split(&text);
        assert_eq!(segments[1], Segment::Added(2));
        assert_eq!(segments[2], Segment::Added(1));
        assert!(built.as_secs_f64() < 2.0, "built in {built:?}");
    }
}
