//! The vocabulary type of chapter 4 (source S0 5.3): byte strings and their ids.
//!
//! A byte-level BPE vocabulary maps byte strings to ids, and says how the merge loop ranks
//! two adjacent parts. tiktoken files ([`super::tiktoken`]) rank a pair by the id of the
//! concatenated bytes: two adjacent parts may merge when their concatenation is a token,
//! lower rank first. Hugging Face `tokenizer.json` files ([`super::tokenizer_json`]) carry an
//! explicit, ordered list of merges; a pair merges only if it is in that list.
//! [`MergeRule`] keeps the two apart so each file is encoded exactly as its own library
//! encodes it.

use crate::error::{Error, Result};
use rustc_hash::FxHashMap;

/// The largest id (rank) a vocabulary may use.
pub const MAX_ID: u32 = (1 << 24) - 1;

/// [`Vocab::byte_id`] of a byte that is not a token (see [`Vocab::new_missing_bytes`]).
pub const NO_BYTE: u32 = u32::MAX;

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
    /// The id of each single byte ([`NO_BYTE`] where it has none).
    byte_ids: [u32; 256],
    /// Some single byte is not a token.
    pub missing_bytes: bool,
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
        let vocab = Self::new_missing_bytes(entries, merges, whole_piece_first, what)?;
        if let Some(b) = (0..=255u8).find(|&b| vocab.byte_ids[b as usize] == NO_BYTE) {
            return Err(Error::field(
                what,
                "vocabulary",
                format!("the single byte 0x{b:02x} is not a token"),
            ));
        }
        Ok(vocab)
    }

    /// [`Vocab::new`] for a vocabulary that may lack some single bytes (SmolLM2's GGUF
    /// has no token for most control characters): such a byte gets [`NO_BYTE`], never
    /// merges, and the tokenizer drops it from the ids, as llama.cpp's BPE does.
    pub fn new_missing_bytes(
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
                    format!("duplicate id: {} and {}", show(prev), show(&bytes)),
                ));
            }
            let bytes: Box<[u8]> = bytes.into_boxed_slice();
            if let Some(prev) = ids.insert(bytes.clone(), id) {
                return Err(Error::field(
                    what,
                    format!("id {id}"),
                    format!("token {} also has id {prev}", show(&bytes)),
                ));
            }
            tokens[id as usize] = Some(bytes);
        }
        let mut byte_ids = [NO_BYTE; 256];
        for b in 0..=255u8 {
            if let Some(&id) = ids.get(&[b][..]) {
                byte_ids[b as usize] = id;
            }
        }
        Ok(Self {
            tokens,
            ids,
            missing_bytes: byte_ids.contains(&NO_BYTE),
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

    /// The id of a single byte ([`NO_BYTE`] when it is not a token).
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

/// A token's bytes as messages quote them (cut short if long).
fn show(b: &[u8]) -> String {
    crate::error::excerpt(&String::from_utf8_lossy(b))
}
