//! The quantiser's block writers through `quant::range::quantize_checked`: finite weights
//! in give finite weights out (every value and scale dequantises finite) or an error
//! naming a weight the format cannot hold — never ±inf, NaN, or a row of zeros from a
//! row with a non-zero weight.
#![no_main]
use libfuzzer_sys::fuzz_target;
use llm_anatomy::quant::range::quantize_checked;
use llm_anatomy::quant::{ALL_TYPES, QK_K, dequantize};

fuzz_target!(|data: &[u8]| {
    // Two super-blocks: the input's f32s (non-finite ones made 0) over a small pattern,
    // all scaled by a power of two the first byte picks (overflow clamped to ±f32::MAX).
    let mut x: Vec<f32> = (0..2 * QK_K).map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0).collect();
    let scale = data.first().map_or(1.0, |&e| 2f32.powi(i32::from(e) - 128));
    for (w, b) in x.iter_mut().zip(data.get(1..).unwrap_or(&[]).chunks_exact(4)) {
        let v = f32::from_le_bytes(b.try_into().unwrap());
        *w = if v.is_finite() { v } else { 0.0 };
    }
    for w in x.iter_mut() {
        *w *= scale;
        if !w.is_finite() {
            *w = f32::MAX.copysign(*w);
        }
    }
    for ty in ALL_TYPES {
        let mut out = Vec::new();
        match quantize_checked(ty, &x, &mut out) {
            Ok(()) => {
                let mut back = vec![0.0f32; x.len()];
                dequantize(ty, &out, &mut back);
                assert!(back.iter().all(|w| w.is_finite()), "{}: non-finite out", ty.name());
                for (b, (xb, yb)) in x.chunks(QK_K).zip(back.chunks(QK_K)).enumerate() {
                    let amax = xb.iter().fold(0f32, |m, w| m.max(w.abs()));
                    // A block whose largest weight is well above the format's resolution
                    // near zero does not come back as all zeros.
                    if amax > 1e-3 {
                        assert!(
                            yb.iter().any(|&w| w != 0.0),
                            "{}: block {b} (max |w| {amax:e}) written as zeros",
                            ty.name()
                        );
                    }
                }
            }
            Err(e) => assert!(out.is_empty(), "{}: {e}: bytes left behind", ty.name()),
        }
    }
});
