//! The KV cache: every layer's keys (after q/k-norm and RoPE) and values for the positions
//! seen so far, so a decode step computes q, k, v for the new token only and attends to
//! the stored ones.
//!
//! Memory per token is `2 · layers · kv_heads · head_dim` numbers (the long-context
//! chapter's `kv_cache_bytes_per_token`); GQA is what keeps it small — Qwen3-30B-A3B stores
//! 4 KV heads for its 32 query heads. The buffers are allocated once for the session's
//! capacity, so decoding never allocates.

use crate::error::{Error, Result};

/// Keys and values, `[layer][position · kv_dim + kv_head · head_dim + i]`, f32.
#[derive(Clone, Debug)]
pub struct KvCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    kv_dim: usize,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for `capacity` positions of `layers` layers, `kv_dim` numbers each.
    pub fn new(layers: usize, kv_dim: usize, capacity: usize) -> KvCache {
        KvCache {
            k: vec![vec![0.0; capacity * kv_dim]; layers],
            v: vec![vec![0.0; capacity * kv_dim]; layers],
            kv_dim,
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
        2 * self.k.len() * self.capacity * self.kv_dim * std::mem::size_of::<f32>()
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

    /// Stores layer `layer`'s key and value of position `pos` (`len ≤ pos < capacity`).
    pub fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let span = pos * self.kv_dim..(pos + 1) * self.kv_dim;
        self.k[layer][span.clone()].copy_from_slice(k);
        self.v[layer][span].copy_from_slice(v);
    }

    /// Layer `layer`'s keys and values for positions `0..end`, each `[end, kv_dim]`.
    pub fn layer(&self, layer: usize, end: usize) -> (&[f32], &[f32]) {
        let n = end * self.kv_dim;
        (&self.k[layer][..n], &self.v[layer][..n])
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
