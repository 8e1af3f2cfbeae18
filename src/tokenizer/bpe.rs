//! Pre-tokenization and the BPE merge loop.
//!
//! Text is first cut into pieces by a regular expression (words with their leading
//! space, single digits, punctuation runs, whitespace runs); BPE then works inside each
//! piece only. Within a piece, start from single bytes and keep merging the adjacent pair
//! of lowest rank until no pair merges. [`bpe_reference`] says this in the fewest lines;
//! [`Bpe::encode_piece`] does the same with reused buffers, and switches to a heap for
//! long pieces so that a 100 kB run of one character costs O(n log n), not O(n²).

use super::vocab::Vocab;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

// ANCHOR: pattern
/// Qwen's pre-tokenizer pattern (Qwen, Qwen2, Qwen2.5, Qwen3 — identical in
/// dashscope's `qwen_tokenizer.py` and in `tokenizer.json`). Unlike GPT-4's `\p{N}{1,3}`,
/// `\p{N}` takes one digit at a time. `\s+(?!\S)` is a look-ahead: a whitespace run stops
/// one character short of a following word, so that the word keeps its leading space.
pub const QWEN_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
// ANCHOR_END: pattern

// ANCHOR: bpe_reference
/// Byte-level BPE on one piece, the plain way: every byte is a part; merge the adjacent
/// pair with the lowest rank (the leftmost on a tie) until no adjacent pair merges.
pub fn bpe_reference(vocab: &Vocab, piece: &[u8]) -> Vec<u32> {
    if vocab.whole_piece_first
        && let Some(id) = vocab.id(piece)
    {
        return vec![id];
    }
    // (start, end, id) of each part.
    let mut parts: Vec<(usize, usize, u32)> = piece
        .iter()
        .enumerate()
        .map(|(i, &b)| (i, i + 1, vocab.byte_id(b)))
        .collect();
    loop {
        let best = parts
            .windows(2)
            .enumerate()
            .filter_map(|(i, w)| {
                let joined = &piece[w[0].0..w[1].1];
                vocab
                    .pair(w[0].2, w[1].2, joined)
                    .map(|(rank, id)| (rank, i, id))
            })
            .min();
        let Some((_, i, id)) = best else { break };
        parts[i] = (parts[i].0, parts[i + 1].1, id);
        parts.remove(i + 1);
    }
    parts.into_iter().map(|p| p.2).collect()
}
// ANCHOR_END: bpe_reference

/// Pieces longer than this (in bytes) use the heap-based merge.
const HEAP_THRESHOLD: usize = 24;

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Part {
    start: u32,
    id: u32,
    /// Rank of merging with the next part (`NONE` if they do not merge).
    rank: u32,
    /// The id that merge would produce.
    merged: u32,
}

/// Reusable buffers for [`Bpe::encode_piece`]; one per thread.
#[derive(Default)]
pub struct Bpe {
    parts: Vec<Part>,
    // Heap variant: linked list over byte positions.
    next: Vec<u32>,
    prev: Vec<u32>,
    ids: Vec<u32>,
    heap: BinaryHeap<Reverse<(u32, u32, u32, u32)>>,
}

impl Bpe {
    /// Appends the ids of one piece to `out`; the same result as [`bpe_reference`].
    pub fn encode_piece(&mut self, vocab: &Vocab, piece: &[u8], out: &mut Vec<u32>) {
        if piece.is_empty() {
            return;
        }
        if vocab.whole_piece_first
            && let Some(id) = vocab.id(piece)
        {
            out.push(id);
            return;
        }
        if piece.len() == 1 {
            out.push(vocab.byte_id(piece[0]));
        } else if piece.len() > HEAP_THRESHOLD {
            self.merge_heap(vocab, piece, out);
        } else {
            self.merge_linear(vocab, piece, out);
        }
    }

    /// tiktoken's loop: a vector of parts, a linear scan for the lowest rank.
    fn merge_linear(&mut self, vocab: &Vocab, piece: &[u8], out: &mut Vec<u32>) {
        let n = piece.len();
        let parts = &mut self.parts;
        parts.clear();
        parts.extend(piece.iter().enumerate().map(|(i, &b)| Part {
            start: i as u32,
            id: vocab.byte_id(b),
            rank: NONE,
            merged: NONE,
        }));
        let end = |parts: &[Part], k: usize| parts.get(k + 1).map_or(n, |p| p.start as usize);
        let rank_at = |parts: &mut [Part], k: usize| {
            if k + 1 < parts.len() {
                let (s, e) = (parts[k].start as usize, end(parts, k + 1));
                let (r, m) = vocab
                    .pair(parts[k].id, parts[k + 1].id, &piece[s..e])
                    .unwrap_or((NONE, NONE));
                parts[k].rank = r;
                parts[k].merged = m;
            }
        };
        for k in 0..n - 1 {
            rank_at(parts, k);
        }
        loop {
            let mut best = (NONE, 0usize);
            for (k, p) in parts.iter().enumerate() {
                if p.rank < best.0 {
                    best = (p.rank, k);
                }
            }
            if best.0 == NONE {
                break;
            }
            let k = best.1;
            parts[k].id = parts[k].merged;
            parts.remove(k + 1);
            parts[k].rank = NONE;
            rank_at(parts, k);
            if k > 0 {
                rank_at(parts, k - 1);
            }
        }
        out.extend(parts.iter().map(|p| p.id));
    }

    /// Same merges in the same order, with a min-heap of candidate pairs keyed by
    /// (rank, position) and lazy deletion of pairs that have gone stale.
    fn merge_heap(&mut self, vocab: &Vocab, piece: &[u8], out: &mut Vec<u32>) {
        let n = piece.len();
        let (next, prev, ids, heap) = (
            &mut self.next,
            &mut self.prev,
            &mut self.ids,
            &mut self.heap,
        );
        next.clear();
        prev.clear();
        ids.clear();
        heap.clear();
        next.extend((1..=n).map(|i| i as u32));
        prev.extend((0..n).map(|i| if i == 0 { NONE } else { i as u32 - 1 }));
        ids.extend(piece.iter().map(|&b| vocab.byte_id(b)));
        let nn = n as u32;
        // Push the pair starting at part `l` (if it has a right neighbour that merges).
        let push = |heap: &mut BinaryHeap<Reverse<(u32, u32, u32, u32)>>,
                    next: &[u32],
                    ids: &[u32],
                    l: u32| {
            let r = next[l as usize];
            if r >= nn {
                return;
            }
            let e = next[r as usize];
            if let Some((rank, _)) = vocab.pair(
                ids[l as usize],
                ids[r as usize],
                &piece[l as usize..e as usize],
            ) {
                heap.push(Reverse((rank, l, r, e)));
            }
        };
        for l in 0..nn - 1 {
            push(heap, next, ids, l);
        }
        while let Some(Reverse((_, l, r, e))) = heap.pop() {
            // Stale if `l` was absorbed, or either side has changed since the push.
            let alive = ids[l as usize] != NONE
                && next[l as usize] == r
                && ids[r as usize] != NONE
                && next[r as usize] == e;
            if !alive {
                continue;
            }
            let (_, merged) = vocab
                .pair(
                    ids[l as usize],
                    ids[r as usize],
                    &piece[l as usize..e as usize],
                )
                .unwrap_or((NONE, NONE));
            ids[l as usize] = merged;
            ids[r as usize] = NONE;
            next[l as usize] = e;
            if e < nn {
                prev[e as usize] = l;
            }
            push(heap, next, ids, l);
            let p = prev[l as usize];
            if p != NONE {
                push(heap, next, ids, p);
            }
        }
        let mut k = 0u32;
        while k < nn {
            out.push(ids[k as usize]);
            k = next[k as usize];
        }
    }
}
