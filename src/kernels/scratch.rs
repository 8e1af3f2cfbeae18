//! Per-thread f32 scratch in memory advised for transparent huge pages, for the weight
//! rows a kernel dequantises or widens once and then reads many times. The register tiles
//! read 32 such rows, each two 4 KiB pages when it is 2048 floats long, against token rows
//! as long: on a heap buffer's 4 KiB pages the tiles ran at 11 GFLOP/s a core where they
//! ran at 29 on 2 MiB pages (`examples/matmul_gflops.rs`, one thread, an AVX2 Zen 1), so
//! the rows get 2 MiB pages where the kernel grants them, and ordinary memory where not.

use memmap2::MmapMut;

/// Huge pages are this large (x86-64's 2 MiB); the buffer starts on such a boundary.
const HUGE: usize = 2 << 20;

/// A growable f32 buffer, in an anonymous mapping advised for huge pages when one could be
/// made, else on the heap.
#[derive(Default)]
pub(super) struct HugeScratch {
    map: Option<MmapMut>,
    heap: Vec<f32>,
}

impl HugeScratch {
    /// `len` floats for the caller to overwrite (zero, or what an earlier call left),
    /// reusing the buffer when it is large enough.
    pub(super) fn floats(&mut self, len: usize) -> &mut [f32] {
        let bytes = len.saturating_mul(4);
        let fits = |m: &MmapMut| m.len() >= bytes.saturating_add(HUGE);
        if !self.map.as_ref().is_some_and(fits) {
            self.map = anonymous(bytes);
        }
        match self.map.as_mut() {
            Some(map) => {
                let start = map.as_ptr().align_offset(HUGE);
                bytemuck::cast_slice_mut(&mut map[start..start + bytes])
            }
            None => {
                self.heap.clear();
                self.heap.resize(len, 0.0);
                &mut self.heap
            }
        }
    }
}

/// An anonymous mapping of at least `bytes` past its first 2 MiB boundary, advised for huge
/// pages; `None` when the system refuses the mapping (the caller falls back to the heap).
fn anonymous(bytes: usize) -> Option<MmapMut> {
    let len = bytes.checked_add(2 * HUGE)?.next_multiple_of(HUGE);
    let map = MmapMut::map_anon(len).ok()?;
    // Advice only: without transparent huge pages the kernel refuses it and the mapping
    // keeps 4 KiB pages, which are correct too.
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::HugePage);
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_aligned_and_reused() {
        let mut s = HugeScratch::default();
        let a = s.floats(1000);
        assert_eq!(a.len(), 1000);
        assert_eq!(a.as_ptr() as usize % HUGE, 0);
        a[999] = 5.0;
        let p = a.as_ptr();
        let b = s.floats(1000);
        assert_eq!((b.as_ptr(), b[999]), (p, 5.0));
        let c = s.floats(HUGE); // 8 MiB of floats: a new mapping
        assert_eq!(c.len(), HUGE);
        assert_eq!(c.as_ptr() as usize % HUGE, 0);
    }
}
