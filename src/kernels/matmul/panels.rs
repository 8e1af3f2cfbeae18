//! The inputs of the outer-product kernels (`x86::gemm_block`, `x86::gemm_block_avx2`):
//! each big enough group's token rows transposed into panels of [`PANEL`] tokens.

use super::{Group, PANEL};

/// Inputs transposed into panels: for each group that takes the outer-product kernel,
/// `ceil(n / PANEL)` panels of `[cols][PANEL]` floats (zero-padded), starting at
/// `first[g]` in `data`.
#[derive(Default)]
pub(super) struct Panels {
    pub(super) data: Vec<f32>,
    pub(super) first: Vec<Option<usize>>,
}

/// Fills `p` with the panels of the groups with at least `min_tokens` rows, in parallel,
/// reusing its buffers (a decode step, one token per group, returns at the first check).
pub(super) fn pack_panels(
    p: &mut Panels,
    groups: &[Group],
    xs: &[f32],
    cols: usize,
    min_tokens: usize,
) {
    use rayon::prelude::*;
    p.first.clear();
    if groups.iter().all(|g| g.n < min_tokens) {
        return;
    }
    // (group, panel) of each PANEL·cols chunk of `data`, in order, after `lead` floats
    // that start the panels on a cache line: a kernel's 16-token load is then one line.
    let mut chunks = Vec::new();
    let mut offsets = Vec::new();
    for g in groups {
        if g.n >= min_tokens {
            offsets.push(Some(chunks.len() * PANEL * cols));
            chunks.extend((0..g.n.div_ceil(PANEL)).map(|k| (*g, k)));
        } else {
            offsets.push(None);
        }
    }
    // Every panel is written in full below, so the buffer is not cleared first.
    let len = chunks.len() * PANEL * cols;
    p.data.resize(len + 16, 0.0);
    let lead = p.data.as_ptr().align_offset(64).min(16);
    p.first
        .extend(offsets.into_iter().map(|o| o.map(|o| o + lead)));
    p.data[lead..lead + len]
        .par_chunks_mut(PANEL * cols)
        .zip(&chunks)
        .for_each(|(panel, &(g, k))| {
            let tokens = k * PANEL..((k + 1) * PANEL).min(g.n);
            if tokens.len() < PANEL {
                panel.fill(0.0); // the padding of a last, partial panel
            }
            for j in tokens {
                let x = &xs[(g.first_in + j) * cols..(g.first_in + j + 1) * cols];
                for (c, &v) in x.iter().enumerate() {
                    panel[c * PANEL + j % PANEL] = v;
                }
            }
        });
}

thread_local! {
    /// The input panels of the grouped matmuls this thread calls.
    pub(super) static PANELS: std::cell::RefCell<Panels> = std::cell::RefCell::new(Panels::default());
}
