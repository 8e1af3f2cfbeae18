//! Activations quantised to 8-bit blocks for the int8 dots of [`super`] (chapter 10): one
//! step per block, the values rounded to it, and the sums the K kernels' minima need. The
//! AVX2 block kernel (`avx2`) writes the same bits as the clear form here.

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(not(target_arch = "x86_64"))]
mod avx2 {
    use super::ActRowMut;
    /// No AVX2 here: the clear form runs.
    pub fn quantize_row<'a>(_: &[f32], _: usize, out: ActRowMut<'a>) -> Result<(), ActRowMut<'a>> {
        Err(out)
    }
}

/// Token rows quantised to 8-bit blocks of `block` values: value `i` of a row is
/// `d[i / block] · qs[i]`, `qs` ∈ −127..=127, and `sums[k]` is the sum of `qs` over the
/// 16 values `16k .. 16k + 16` (the K kernels subtract minima with it). The buffers are
/// reused from call to call, so a decode step allocates nothing once they have grown.
#[derive(Default)]
pub struct QuantizedRows {
    pub block: usize,
    pub cols: usize,
    pub d: Vec<f32>,
    pub qs: Vec<i8>,
    pub sums: Vec<i16>,
    /// Per block, `d · Σ qs` (the K kernels' minima take it 8 blocks at a time).
    pub dsums: Vec<f32>,
    /// `cols / block`, kept so that [`QuantizedRows::row`], called per token and tile,
    /// divides nothing.
    blocks_per_row: usize,
}

/// One quantised row of [`QuantizedRows`].
#[derive(Clone, Copy)]
pub struct ActRow<'a> {
    pub d: &'a [f32],
    pub qs: &'a [i8],
    pub sums: &'a [i16],
    pub dsums: &'a [f32],
}

/// One row of [`QuantizedRows`] being written by the quantiser.
pub struct ActRowMut<'a> {
    pub d: &'a mut [f32],
    pub qs: &'a mut [i8],
    pub sums: &'a mut [i16],
    pub dsums: &'a mut [f32],
}

impl QuantizedRows {
    /// Quantises the rows of `xs` (`[·, cols]`, `cols` a multiple of `block`, itself a
    /// multiple of 16): each block's step is `max|x| / 127` and `q = round(x / d)`. A block
    /// holding a NaN or an infinity gets a NaN step, so the dot is NaN, not silently finite.
    pub fn quantize(&mut self, xs: &[f32], cols: usize, block: usize) {
        self.quantize_where(xs, cols, block, |_| true);
    }

    /// [`QuantizedRows::quantize`] for the rows `t` where `keep(t)`; the others are left
    /// as they were (a grouped matmul quantises only the groups its int8 path takes).
    pub fn quantize_where(
        &mut self,
        xs: &[f32],
        cols: usize,
        block: usize,
        keep: impl Fn(usize) -> bool + Sync,
    ) {
        assert!(
            block.is_multiple_of(16) && cols.is_multiple_of(block) && xs.len().is_multiple_of(cols),
            "QuantizedRows::quantize: shape"
        );
        self.resize(xs.len(), cols, block);
        // Row slices: each token row is quantised on its own, so the threads split the rows.
        let nb = self.blocks_per_row;
        let one_row = |((((x, d), qs), sums), dsums): RowSlices| {
            quantize_row(x, block, ActRowMut { d, qs, sums, dsums })
        };
        let (d, qs, sums, dsums) = (&mut self.d, &mut self.qs, &mut self.sums, &mut self.dsums);
        if xs.len() >= PARALLEL_MIN_VALUES && xs.len() > cols {
            use rayon::prelude::*;
            xs.par_chunks_exact(cols)
                .zip(d.par_chunks_exact_mut(nb))
                .zip(qs.par_chunks_exact_mut(cols))
                .zip(sums.par_chunks_exact_mut(cols / 16))
                .zip(dsums.par_chunks_exact_mut(nb))
                .enumerate()
                .filter(|(t, _)| keep(*t))
                .for_each(|(_, row)| one_row(row));
        } else {
            xs.chunks_exact(cols)
                .zip(d.chunks_exact_mut(nb))
                .zip(qs.chunks_exact_mut(cols))
                .zip(sums.chunks_exact_mut(cols / 16))
                .zip(dsums.chunks_exact_mut(nb))
                .enumerate()
                .filter(|(t, _)| keep(*t))
                .for_each(|(_, row)| one_row(row));
        }
    }

    /// Sizes the buffers for `values` values in rows of `cols`, blocks of `block`.
    pub(super) fn resize(&mut self, values: usize, cols: usize, block: usize) {
        self.block = block;
        self.cols = cols;
        self.blocks_per_row = cols / block;
        let blocks = values / block;
        self.d.resize(blocks, 0.0);
        self.qs.resize(values, 0);
        self.sums.resize(values / 16, 0);
        self.dsums.resize(blocks, 0.0);
    }

    /// Token row `t`.
    #[inline]
    pub fn row(&self, t: usize) -> ActRow<'_> {
        let nb = self.blocks_per_row;
        ActRow {
            d: &self.d[t * nb..(t + 1) * nb],
            qs: &self.qs[t * self.cols..(t + 1) * self.cols],
            sums: &self.sums[t * self.cols / 16..(t + 1) * self.cols / 16],
            dsums: &self.dsums[t * nb..(t + 1) * nb],
        }
    }

    /// The buffers as one row to be written, for tests that quantise a single row.
    #[cfg(test)]
    pub(super) fn whole_mut(&mut self) -> ActRowMut<'_> {
        let (d, qs) = (&mut self.d, &mut self.qs);
        let (sums, dsums) = (&mut self.sums, &mut self.dsums);
        ActRowMut { d, qs, sums, dsums }
    }

    /// Row `t` widened back to f32 (`d · q`), for tests.
    pub fn dequantize_row(&self, t: usize) -> Vec<f32> {
        let a = self.row(t);
        a.qs.iter()
            .enumerate()
            .map(|(i, &q)| a.d[i / self.block] * q as f32)
            .collect()
    }
}

/// Activations below this many values are quantised on the calling thread alone.
pub(super) const PARALLEL_MIN_VALUES: usize = 1 << 14;

/// One token row's output slices in [`QuantizedRows`]: the input, `d`, `qs`, `sums`, `dsums`.
type RowSlices<'a> = (
    (((&'a [f32], &'a mut [f32]), &'a mut [i8]), &'a mut [i16]),
    &'a mut [f32],
);

/// Quantises one token row `x` in blocks of `block` into its slices of [`QuantizedRows`]:
/// the AVX2 form where the CPU has it (the same bits), else [`quantize_row_reference`].
pub(super) fn quantize_row(x: &[f32], block: usize, out: ActRowMut) {
    if let Err(out) = avx2::quantize_row(x, block, out) {
        quantize_row_reference(x, block, out);
    }
}

/// [`quantize_row`], the clear reference form.
fn quantize_row_reference(x: &[f32], block: usize, out: ActRowMut) {
    quantize_row_with(x, block, out, quantize_block_reference);
}

/// Quantises `x` block by block with `quantize_block`, which fills a block's values and
/// 16-value sums and returns its step and `Σ q`; the row's `d · Σ q` are formed here.
#[inline(always)]
fn quantize_row_with(
    x: &[f32],
    block: usize,
    out: ActRowMut,
    mut quantize_block: impl FnMut(&[f32], &mut [i8], &mut [i16]) -> (f32, i32),
) {
    let ActRowMut { d, qs, sums, dsums } = out;
    assert!(
        block.is_multiple_of(16)
            && block > 0
            && qs.len() == x.len()
            && d.len() * block == x.len()
            && dsums.len() == d.len()
            && sums.len() * 16 == x.len(),
        "quantize_row: shapes"
    );
    let per_block = x.chunks_exact(block).zip(qs.chunks_exact_mut(block));
    let per_block = per_block.zip(sums.chunks_exact_mut(block / 16));
    for (((xb, qb), sb), (d_slot, dsum)) in per_block.zip(d.iter_mut().zip(dsums)) {
        let (d, total) = quantize_block(xb, qb, sb);
        *d_slot = d;
        *dsum = d * total as f32;
    }
}

/// One block, the clear form: the step `d = max|x| / 127` (NaN if a value is not
/// finite), each value rounded to `x / d` (halves away from zero), the 16-value sums;
/// returns `d` and `Σ q`.
fn quantize_block_reference(xb: &[f32], qb: &mut [i8], sb: &mut [i16]) -> (f32, i32) {
    let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let finite = xb.iter().all(|v| v.is_finite());
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut total = 0i32;
    for ((x16, q16), s) in xb.chunks_exact(16).zip(qb.chunks_exact_mut(16)).zip(sb) {
        for (q, &v) in q16.iter_mut().zip(x16) {
            *q = round_to_i8(v * inv);
        }
        *s = q16.iter().map(|&q| q as i16).sum();
        total += *s as i32;
    }
    (if finite { d } else { f32::NAN }, total)
}

/// `y.round().clamp(-127.0, 127.0) as i8` (halves away from zero, NaN to 0) without a
/// call to libm's `roundf`, so the loop vectorises: the integer part of `|y|` is exact
/// below 2²³, and so is the fraction left after it.
#[inline(always)]
fn round_to_i8(y: f32) -> i8 {
    let a = y.abs();
    // A comparison, not `min`, so that NaN stays NaN and truncates to 0.
    let a = if a > 127.0 { 127.0 } else { a };
    let whole = a as i32;
    let r = whole + i32::from(a - whole as f32 >= 0.5);
    (if y < 0.0 { -r } else { r }) as i8
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The libm-free rounding equals `round().clamp()` on every f32 in ±130 around the
    /// halves and integers, on the extremes and on NaN.
    #[test]
    fn round_to_i8_equals_round_and_clamp() {
        let mut ys = vec![
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e30,
            -1e30,
        ];
        for k in -260..=260 {
            let c = k as f32 * 0.5;
            let mut up = c;
            let mut down = c;
            for _ in 0..4 {
                ys.extend([up, down]);
                up = f32::from_bits(up.to_bits() + 1);
                down = f32::from_bits(down.to_bits().max(1) - 1);
            }
        }
        for y in ys {
            let want = y.round().clamp(-127.0, 127.0) as i8;
            assert_eq!(round_to_i8(y), want, "{y:e}");
        }
    }
}
