//! The streaming loops of the read-bandwidth probe: `S` interleaved streams over a slice of
//! 32-bit words, folded with XOR (a one-cycle integer operation, so no add latency paces
//! the loads, and the result is exact whatever the order), with 64-byte AVX-512 loads,
//! 32-byte AVX2 loads, or portable code, chosen at run time. `ANATOMY_NO_AVX512` drops to
//! AVX2 (as it does for the kernels) and `ANATOMY_PROBE_PORTABLE=1` to the portable loop, so
//! the older, narrower probe can still be measured on a wide CPU.

/// Which loads a streaming loop uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadIsa {
    Avx512,
    Avx2,
    Portable,
}

impl ReadIsa {
    pub fn name(self) -> &'static str {
        match self {
            ReadIsa::Avx512 => "avx512",
            ReadIsa::Avx2 => "avx2",
            ReadIsa::Portable => "portable",
        }
    }

    /// Whether this CPU can run the loop (the portable one always).
    pub fn supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            ReadIsa::Avx512 => crate::kernels::policy::cpu().avx512f,
            #[cfg(target_arch = "x86_64")]
            ReadIsa::Avx2 => crate::kernels::policy::cpu().avx2,
            ReadIsa::Portable => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }
}

/// The widest loads this CPU has, unless the environment turns them off.
pub fn read_isa() -> ReadIsa {
    if crate::kernels::policy::current().probe_portable() {
        return ReadIsa::Portable;
    }
    if crate::kernels::use_avx512() && ReadIsa::Avx512.supported() {
        return ReadIsa::Avx512;
    }
    if ReadIsa::Avx2.supported() {
        return ReadIsa::Avx2;
    }
    ReadIsa::Portable
}

/// Words per 64-byte cache line.
const LINE: usize = 16;

/// XOR of every word of `x`, read as `S` interleaved streams (its `S` equal parts of whole
/// cache lines advancing together, one line of each per step, as a matvec tile advances
/// along `S` weight rows) with `isa`'s loads. With `PF` > 0 each stream also prefetches
/// the line `PF` lines ahead, as the kernels fetch their next rows. The few words before
/// the first 64-byte boundary and after the last whole step are folded in scalar code. An
/// `isa` the CPU lacks runs the portable loop.
pub fn xor_streams<const S: usize, const PF: usize>(x: &[u32], isa: ReadIsa) -> u32 {
    let head = x.as_ptr().align_offset(64).min(x.len());
    let body = &x[head..];
    let part = body.len() / S / LINE * LINE;
    let scalar = |w: &[u32]| w.iter().fold(0, |a, &b| a ^ b);
    let edges = scalar(&x[..head]) ^ scalar(&body[S * part..]);
    let streams = &body[..S * part];
    let folded = match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512F was just detected; `streams` holds `S · part` words from a
        // 64-byte boundary, `part` a multiple of LINE, exactly what the loop reads.
        ReadIsa::Avx512 if isa.supported() => unsafe { xor_avx512::<S, PF>(streams, part) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX2 was just detected; the slice is as for the AVX-512 loop.
        ReadIsa::Avx2 if isa.supported() => unsafe { xor_avx2::<S, PF>(streams, part) },
        _ => xor_portable::<S>(streams, part),
    };
    edges ^ folded
}

/// The portable loop: 16 lanes per stream, which LLVM vectorises to the baseline's width.
fn xor_portable<const S: usize>(x: &[u32], part: usize) -> u32 {
    let mut acc = [[0u32; LINE]; S];
    for i in (0..part).step_by(LINE) {
        for (s, a) in acc.iter_mut().enumerate() {
            let v = &x[s * part + i..s * part + i + LINE];
            for k in 0..LINE {
                a[k] ^= v[k];
            }
        }
    }
    acc.iter().flatten().fold(0, |a, &b| a ^ b)
}

/// # Safety
/// The CPU must have AVX-512F; `x` holds `S · part` words (`part` a multiple of 16).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn xor_avx512<const S: usize, const PF: usize>(x: &[u32], part: usize) -> u32 {
    use std::arch::x86_64::*;
    debug_assert!(x.len() >= S * part && part.is_multiple_of(LINE));
    let p = x.as_ptr();
    // Four accumulators take the streams in turn; one would do (XOR's latency is one
    // cycle, a 64-byte load a cycle is past any memory), four leave no doubt.
    let mut acc = [_mm512_setzero_si512(); 4];
    let mut i = 0;
    while i < part {
        for s in 0..S {
            let at = p.wrapping_add(s * part + i);
            if PF > 0 {
                // A prefetch is a hint that never faults, whatever the address;
                // `wrapping_add` keeps the address computation itself defined.
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PF * LINE) as *const i8);
            }
            // SAFETY: s < S and i + 16 ≤ part, so the 16 words lie inside `x`.
            let v = unsafe { _mm512_loadu_si512(at as *const __m512i) };
            acc[s % 4] = _mm512_xor_si512(acc[s % 4], v);
        }
        i += LINE;
    }
    let a = _mm512_xor_si512(
        _mm512_xor_si512(acc[0], acc[1]),
        _mm512_xor_si512(acc[2], acc[3]),
    );
    let mut lanes = [0u32; LINE];
    // SAFETY: `lanes` holds exactly the 64 bytes an unaligned 512-bit store writes.
    unsafe { _mm512_storeu_si512(lanes.as_mut_ptr() as *mut __m512i, a) };
    lanes.iter().fold(0, |a, &b| a ^ b)
}

/// [`xor_avx512`] with two 32-byte loads per line.
///
/// # Safety
/// The CPU must have AVX2; `x` holds `S · part` words (`part` a multiple of 16).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn xor_avx2<const S: usize, const PF: usize>(x: &[u32], part: usize) -> u32 {
    use std::arch::x86_64::*;
    debug_assert!(x.len() >= S * part && part.is_multiple_of(LINE));
    let p = x.as_ptr();
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut i = 0;
    while i < part {
        for s in 0..S {
            let at = p.wrapping_add(s * part + i);
            if PF > 0 {
                // A prefetch never faults; `wrapping_add` keeps the address defined.
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PF * LINE) as *const i8);
            }
            // SAFETY: s < S and i + 16 ≤ part, so both 8-word halves lie inside `x`.
            let (lo, hi) = unsafe {
                (
                    _mm256_loadu_si256(at as *const __m256i),
                    _mm256_loadu_si256(at.add(8) as *const __m256i),
                )
            };
            acc[2 * s % 4] = _mm256_xor_si256(acc[2 * s % 4], lo);
            acc[(2 * s + 1) % 4] = _mm256_xor_si256(acc[(2 * s + 1) % 4], hi);
        }
        i += LINE;
    }
    let a = _mm256_xor_si256(
        _mm256_xor_si256(acc[0], acc[1]),
        _mm256_xor_si256(acc[2], acc[3]),
    );
    let mut lanes = [0u32; 8];
    // SAFETY: `lanes` holds exactly the 32 bytes an unaligned 256-bit store writes.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, a) };
    lanes.iter().fold(0, |a, &b| a ^ b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stream count, prefetch distance and load width folds to the plain XOR of the
    /// words (exact: XOR does not round), on a slice that starts off a line boundary and
    /// ends in a partial step; a width the CPU lacks is skipped with a note.
    #[test]
    fn every_loop_folds_every_word_once() {
        let words: Vec<u32> = (0..20_011u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        for x in [&words[..], &words[3..], &words[..5]] {
            let want = x.iter().fold(0, |a, &b| a ^ b);
            for isa in [ReadIsa::Avx512, ReadIsa::Avx2, ReadIsa::Portable] {
                if !isa.supported() {
                    eprintln!("skipped: this CPU has no {} loads", isa.name());
                    continue;
                }
                let got = [
                    xor_streams::<1, 0>(x, isa),
                    xor_streams::<4, 0>(x, isa),
                    xor_streams::<8, 0>(x, isa),
                    xor_streams::<8, 16>(x, isa),
                    xor_streams::<16, 0>(x, isa),
                ];
                assert!(got.iter().all(|&g| g == want), "{} {got:?}", isa.name());
            }
        }
    }
}
