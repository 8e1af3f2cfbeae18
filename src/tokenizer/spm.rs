//! SentencePiece-style tokenization as llama.cpp runs it for a GGUF vocabulary whose
//! `tokenizer.ggml.model` is `"llama"` (Gemma's, Llama 2's): no pre-tokenizer split and no
//! merge list. Spaces become `▁` (U+2581); the text starts as one symbol per character;
//! the adjacent pair whose concatenation is a token with the highest score
//! (`tokenizer.ggml.scores`) merges first, the leftmost on a tie, until no adjacent pair
//! forms a token. A final symbol that is no token falls back to its bytes, the
//! `<0xXX>` tokens. Added tokens are cut out before, as for byte-level BPE.

use super::vocab::NO_BYTE;
use rustc_hash::FxHashMap;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// The word-boundary mark that stands for a space in SentencePiece tokens.
pub const SPACE_MARK: char = '\u{2581}';

/// A SentencePiece vocabulary: every token's text (of any type, as llama.cpp's lookup
/// sees them), its score, and the byte tokens.
#[derive(Clone, Debug)]
pub struct Spm {
    ids: FxHashMap<Box<str>, u32>,
    scores: Vec<f32>,
    byte_ids: [u32; 256],
    /// id → byte, for the `<0xXX>` tokens.
    bytes_of: FxHashMap<u32, u8>,
    /// Put a space before text that starts the input or follows an added token
    /// (`tokenizer.ggml.add_space_prefix`).
    pub add_space_prefix: bool,
}

/// One adjacent pair that forms a token: its score, where it is, and its length in bytes
/// when it was found (a pair whose sides changed since is stale).
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl Ord for Bigram {
    /// Highest score first; on equal scores the leftmost (llama.cpp's comparator).
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}

/// A run of the text: byte offset and length (0 once merged into its left neighbour),
/// and its neighbours in the chain.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Spm {
    /// `tokens[i]` with `scores[i]`; `<0xXX>` tokens whose type is byte give the byte
    /// fallback. The caller has checked the lengths match.
    pub fn new(tokens: &[&str], scores: Vec<f32>, byte_tokens: &[(u32, u8)]) -> Self {
        let mut ids = FxHashMap::with_capacity_and_hasher(tokens.len(), Default::default());
        for (i, t) in tokens.iter().enumerate() {
            // The last id of a repeated text wins, as in llama.cpp's map.
            ids.insert(Box::from(*t), i as u32);
        }
        let mut byte_ids = [NO_BYTE; 256];
        for &(id, b) in byte_tokens {
            byte_ids[b as usize] = id;
        }
        Self {
            ids,
            scores,
            byte_ids,
            bytes_of: byte_tokens.iter().copied().collect(),
            add_space_prefix: false,
        }
    }

    /// The byte a `<0xXX>` token stands for.
    pub fn byte_of(&self, id: u32) -> Option<&u8> {
        self.bytes_of.get(&id)
    }

    /// Marks the bytes of the characters of `text` that are no token and fall back to a
    /// byte with no `<0xXX>` token (what [`Spm::encode`] leaves out).
    pub fn mark_bytes_without_token(&self, text: &str, missing: &mut [bool; 256]) {
        let mut buf = [0u8; 4];
        for c in text.chars() {
            let c = if c == ' ' { SPACE_MARK } else { c };
            let s = c.encode_utf8(&mut buf);
            if !self.ids.contains_key(&*s) {
                for b in s.bytes() {
                    missing[b as usize] |= self.byte_ids[b as usize] == NO_BYTE;
                }
            }
        }
    }

    /// Appends the ids of `text` (no added tokens in it); `prefix_space` when the text
    /// starts the input or follows an added token.
    pub fn encode(&self, text: &str, prefix_space: bool, out: &mut Vec<u32>) {
        let mut escaped = String::with_capacity(text.len() + 3);
        if self.add_space_prefix && prefix_space {
            escaped.push(SPACE_MARK);
        }
        escaped.extend(text.chars().map(|c| if c == ' ' { SPACE_MARK } else { c }));
        let mut symbols: Vec<Symbol> = Vec::with_capacity(escaped.len());
        for (start, c) in escaped.char_indices() {
            let i = symbols.len();
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: Some(i + 1),
            });
        }
        let Some(last) = symbols.last_mut() else {
            return;
        };
        last.next = None;
        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.push_bigram(&escaped, &symbols, i - 1, i, &mut queue);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = r.next;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            if let Some(p) = l.prev {
                self.push_bigram(&escaped, &symbols, p, b.left, &mut queue);
            }
            if let Some(n) = r.next {
                self.push_bigram(&escaped, &symbols, b.left, n, &mut queue);
            }
        }
        let mut at = Some(0);
        while let Some(i) = at {
            let s = symbols[i];
            self.emit(&escaped[s.start..s.start + s.len], out);
            at = s.next;
        }
    }

    /// Queues the pair `left`, `right` if together they are a token.
    fn push_bigram(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        let (l, r) = (symbols[left], symbols[right]);
        let joined = &text[l.start..r.start + r.len];
        if let Some(&id) = self.ids.get(joined) {
            queue.push(Bigram {
                score: self.scores[id as usize],
                left,
                right,
                size: joined.len(),
            });
        }
    }

    /// A final symbol: its token, or its bytes' tokens. (llama.cpp would first undo the
    /// merges that built a symbol that is no token, but every merge made a token, so
    /// only single characters can miss.)
    fn emit(&self, piece: &str, out: &mut Vec<u32>) {
        if let Some(&id) = self.ids.get(piece) {
            out.push(id);
            return;
        }
        out.extend(
            piece
                .bytes()
                .map(|b| self.byte_ids[b as usize])
                .filter(|&id| id != NO_BYTE),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_score_merges_first_and_unknown_characters_fall_back_to_bytes() {
        // ids: 0 "a", 1 "b", 2 "ab", 3 "▁", 4 "▁a", 5 "<0xC3>", 6 "<0xA9>"
        let tokens = ["a", "b", "ab", "▁", "▁a", "<0xC3>", "<0xA9>"];
        let scores = vec![0.0, 0.0, -1.0, 0.0, -0.5, 0.0, 0.0];
        let spm = Spm::new(&tokens, scores, &[(5, 0xC3), (6, 0xA9)]);
        let mut out = Vec::new();
        // "▁a" (−0.5) beats "ab" (−1): " ab" → ▁a, b.
        spm.encode(" ab", false, &mut out);
        assert_eq!(out, [4, 1]);
        out.clear();
        spm.encode("abé", false, &mut out);
        assert_eq!(out, [2, 5, 6]);
    }
}
