//! The KV cache: every layer's keys (after q/k-norm and RoPE) and values for the positions
//! seen so far, so a decode step computes q, k, v for the new token only and attends to
//! the stored ones.
//!
//! Memory per token is `2 · layers · kv_heads · head_dim` numbers (the long-context
//! chapter's `kv_cache_bytes_per_token`); GQA is what keeps it small — Qwen3-30B-A3B stores
//! 4 KV heads for its 32 query heads. The buffers are allocated once for the session's
//! capacity, so decoding never allocates.

use crate::error::{Error, Result};
use crate::kernels::KvHead;

/// Keys and values, `[layer][kv_head · capacity · head_dim + position · head_dim + i]`,
/// f32: a KV head's rows are contiguous, so a decode step reads each head's keys and
/// values as one sequential stream (position-major rows would interleave the heads, and
/// a head's rows, a stride apart, restart the hardware prefetchers at every page).
#[derive(Clone, Debug)]
pub struct KvCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    kv_heads: usize,
    head_dim: usize,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for `capacity` positions of `layers` layers, `kv_heads` heads of
    /// `head_dim` numbers each.
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize, capacity: usize) -> KvCache {
        let per_layer = kv_heads * capacity * head_dim;
        KvCache {
            k: vec![vec![0.0; per_layer]; layers],
            v: vec![vec![0.0; per_layer]; layers],
            kv_heads,
            head_dim,
            len: 0,
            capacity,
        }
    }

    /// Positions already stored.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held (f32 keys and values).
    pub fn bytes(&self) -> usize {
        let per_layer = self.kv_heads * self.capacity * self.head_dim;
        2 * self.k.len() * per_layer * std::mem::size_of::<f32>()
    }

    /// Checks that `n` more positions fit.
    pub fn reserve(&self, n: usize) -> Result<()> {
        if self.len + n > self.capacity {
            return Err(Error::Invalid(format!(
                "KV cache full: {} positions stored, {n} more requested, capacity {}",
                self.len, self.capacity
            )));
        }
        Ok(())
    }

    /// Stores layer `layer`'s key and value of position `pos` (`len ≤ pos < capacity`),
    /// each `[kv_heads · head_dim]`, head by head into its own rows.
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        // Past the capacity a head's rows would run into the next head's: refuse.
        assert!(
            pos < self.capacity,
            "KV cache: position {pos} past the capacity"
        );
        let d = self.head_dim;
        for (g, (kh, vh)) in k.chunks_exact(d).zip(v.chunks_exact(d)).enumerate() {
            let at = (g * self.capacity + pos) * d;
            self.k[layer][at..at + d].copy_from_slice(kh);
            self.v[layer][at..at + d].copy_from_slice(vh);
        }
    }

    /// KV head `g` of layer `layer` for positions `0..end`: its keys and values, `[end,
    /// head_dim]` each, contiguous.
    pub fn head(&self, layer: usize, g: usize, end: usize) -> KvHead<'_> {
        assert!(
            end <= self.capacity,
            "KV cache: {end} positions past the capacity"
        );
        let at = g * self.capacity * self.head_dim;
        let n = end * self.head_dim;
        KvHead {
            keys: &self.k[layer][at..at + n],
            values: &self.v[layer][at..at + n],
            stride: self.head_dim,
            offset: 0,
        }
    }

    /// Marks `n` more positions as stored (after every layer has written them).
    pub fn advance(&mut self, n: usize) {
        self.len += n;
        debug_assert!(self.len <= self.capacity);
    }

    /// Forgets everything (the buffers stay allocated).
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Heads keep their own rows: what a position writes for head g is what head g reads
    /// back, and no other head sees it.
    #[test]
    fn each_head_reads_back_its_own_rows() {
        let (heads, d, capacity) = (3, 4, 5);
        let mut cache = KvCache::new(2, heads, d, capacity);
        for pos in 0..capacity {
            let k: Vec<f32> = (0..heads * d).map(|i| (100 * pos + i) as f32).collect();
            let v: Vec<f32> = k.iter().map(|x| -x).collect();
            cache.write(1, pos, &k, &v);
        }
        for g in 0..heads {
            let head = cache.head(1, g, capacity);
            for pos in 0..capacity {
                let want = (100 * pos + g * d) as f32;
                assert_eq!(head.keys[pos * d], want, "head {g} position {pos}");
                assert_eq!(head.values[pos * d + d - 1], -(want + (d - 1) as f32));
            }
        }
    }

    #[test]
    #[should_panic(expected = "past the capacity")]
    fn a_read_past_the_capacity_is_refused() {
        KvCache::new(1, 2, 4, 3).head(0, 0, 4);
    }

    #[test]
    #[should_panic(expected = "past the capacity")]
    fn a_write_past_the_capacity_is_refused() {
        KvCache::new(1, 2, 4, 3).write(0, 3, &[0.0; 8], &[0.0; 8]);
    }
}
