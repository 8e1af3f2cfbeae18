//! The one-token bf16 matvec (a decode step), in 256-bit registers also where AVX-512 is
//! on: a 512-bit form read no faster, and one kernel gives every x86 CPU the same decode
//! bits. Two things set its pace, and neither is the FMAs:
//! - **Work per weight.** A 32-byte load holds sixteen bf16 weights, two to a 32-bit word.
//!   Shifting the words up by 16 makes the even weights f32 and masking off their low
//!   halves makes the odd ones f32: one load and two integer operations for sixteen
//!   weights, where widening eight at a time costs two zero-extensions and two shifts. The
//!   input is split once per call into its even and odd elements to meet them.
//! - **Stream length.** The four rows a tile reads side by side are a quarter of the row
//!   block apart, so each stream runs on through consecutive rows (pages) instead of
//!   stopping after one row, as four adjacent rows would (`examples/matvec_rates.rs`).

use super::Out;
use std::arch::x86_64::*;

/// Rows a tile reads at once, each its own stream through the block.
const STREAMS: usize = 4;

thread_local! {
    /// The split input of rows longer than [`STACK_COLS`], each sixteen-column chunk as its
    /// eight even then its eight odd elements.
    static SPLIT: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Rows up to this long split their input on the stack (8 KiB): a per-thread buffer
/// grows the first time each pool thread meets the row length, which in a decode step is
/// whenever work stealing first hands that thread such a task. (A larger stack buffer's
/// zeroing, once per task, cost a 4,096-column row a tenth of its rate.)
const STACK_COLS: usize = 2048;

/// `f` with a buffer of `cols` floats: on the stack up to [`STACK_COLS`], else this
/// thread's [`SPLIT`].
fn with_split_buffer<R>(cols: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    match cols {
        0..=STACK_COLS => f(&mut [0.0f32; STACK_COLS][..cols]),
        _ => SPLIT.with_borrow_mut(|split| {
            split.resize(cols, 0.0);
            f(split)
        }),
    }
}

/// `out[0, i] = w[i]·x` for the `w.len() / cols` rows of `w`. Returns false, having done
/// nothing, unless `cols` is a positive multiple of 16 and `x` holds `cols` floats.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `out` may write token 0 at rows
/// `0 .. w.len() / cols` (the contract of [`Out::set`]).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn matvec(w: &[half::bf16], cols: usize, x: &[f32], out: Out) -> bool {
    if cols == 0 || !cols.is_multiple_of(16) || x.len() < cols {
        return false;
    }
    with_split_buffer(cols, |split| {
        for (from, to) in x[..cols].chunks_exact(16).zip(split.chunks_exact_mut(16)) {
            // SAFETY: both chunks hold 16 floats, what the two loads and two stores touch.
            unsafe {
                let (a, b) = (
                    _mm256_loadu_ps(from.as_ptr()),
                    _mm256_loadu_ps(from.as_ptr().add(8)),
                );
                // shuffle_ps picks within 128-bit lanes ([a0 a2 b0 b2 | a4 a6 b4 b6]); the
                // 64-bit permute puts the pairs back in order ([a0 a2 a4 a6 | b0 b2 b4 b6]).
                let even = _mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(
                    _mm256_shuffle_ps::<0x88>(a, b),
                ));
                let odd = _mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(
                    _mm256_shuffle_ps::<0xDD>(a, b),
                ));
                _mm256_storeu_pd(to.as_mut_ptr() as *mut f64, even);
                _mm256_storeu_pd(to.as_mut_ptr().add(8) as *mut f64, odd);
            }
        }
        let rows = w.len() / cols;
        let per_stream = rows / STREAMS;
        for r in 0..per_stream {
            // SAFETY: rows r + s·per_stream < STREAMS·per_stream ≤ rows exist, `split` holds
            // `cols` floats, and `out` may write every row of the block (ours).
            unsafe { tile::<STREAMS>(w, cols, split, out, r, per_stream) };
        }
        for r in STREAMS * per_stream..rows {
            // SAFETY: as above, for one row.
            unsafe { tile::<1>(w, cols, split, out, r, 0) };
        }
    });
    true
}

/// Rows `r, r + gap, …, r + (R-1)·gap` against the split input, sixteen columns a step,
/// two accumulators a row (even and odd columns).
///
/// # Safety
/// Those rows of `w` (`[rows, cols]`, cols a multiple of 16) exist, `xs` holds `cols`
/// floats, the CPU supports AVX2 and FMA, and `out` may write those rows for token 0.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const R: usize>(
    w: &[half::bf16],
    cols: usize,
    xs: &[f32],
    out: Out,
    r: usize,
    gap: usize,
) {
    let mut even = [_mm256_setzero_ps(); R];
    let mut odd = [_mm256_setzero_ps(); R];
    let high_halves = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
    let (wp, xp) = (w.as_ptr(), xs.as_ptr());
    for c in (0..cols).step_by(16) {
        // SAFETY: c + 16 ≤ cols, so both halves of the chunk lie inside xs.
        let (xe, xo) = unsafe { (_mm256_loadu_ps(xp.add(c)), _mm256_loadu_ps(xp.add(c + 8))) };
        for i in 0..R {
            // SAFETY: row r + i·gap exists and c + 16 ≤ cols: 32 readable bytes.
            let v = unsafe { _mm256_loadu_si256(wp.add((r + i * gap) * cols + c).cast()) };
            let we = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v));
            let wo = _mm256_castsi256_ps(_mm256_and_si256(v, high_halves));
            even[i] = _mm256_fmadd_ps(we, xe, even[i]);
            odd[i] = _mm256_fmadd_ps(wo, xo, odd[i]);
        }
    }
    for i in 0..R {
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` holds exactly the 8 floats an unaligned 256-bit store writes.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_add_ps(even[i], odd[i])) };
        let s = (lanes[0] + lanes[4])
            + (lanes[1] + lanes[5])
            + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
        // SAFETY: row r + i·gap is in this task's block and token 0 exists (the caller's).
        unsafe { out.set(0, r + i * gap, s) };
    }
}
