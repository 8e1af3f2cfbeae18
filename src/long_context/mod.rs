//! Chapter 3 — length extrapolation (source S0 5.2, S1 §2).
//!
//! A model trained on `L_train` positions meets angles it never saw when read past them
//! ([`scaling::ood_planes`]). The fixes change the rotation frequencies: position
//! interpolation divides them all, NTK-aware scaling raises the base, YaRN treats fast
//! and slow planes differently and adds an attention temperature, llama3 smooths between
//! two wavelengths ([`scaling`]). The cost of long context is also quadratic attention,
//! which tiling with an online softmax removes from memory ([`attention`]); [`memory`]
//! sizes attention matrices and KV caches.
//!
//! Claims backed: `ext.*`.

pub mod attention;
pub mod lost_in_middle;
pub mod memory;
pub mod scaling;
