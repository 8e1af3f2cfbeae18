//! Chapters 1–2 — position encoding (source S0 5.1, S1 §1).
//!
//! Attention without position information is permutation-equivariant ([`equivariance`]);
//! the original Transformer adds a fixed sinusoidal vector ([`sinusoidal`]); RoPE rotates
//! query and key pairs by position-dependent angles so that their dot product depends only
//! on the offset ([`rope`]); the sum of those rotations decays with distance ([`decay`]).
//!
//! Claims backed here: `rope.relative`, `rope.rotation_compose`, `rope.complex_equiv`,
//! `rope.layouts`, `rope.permutation_equivariance`, `rope.clock.*`,
//! `rope.slowest_quarter_turn`, `rope.slowest_half_turn`, `rope.decay_shape`,
//! `rope.sinusoidal`.

pub mod decay;
pub mod equivariance;
pub mod rope;
pub mod sinusoidal;
