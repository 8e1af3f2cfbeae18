//! Per-thread f32 scratch in memory advised for transparent huge pages, for the weight
//! rows a kernel dequantises once and then reads many times: the register tiles read 32
//! such rows against as many token rows, and with 2048-float rows they ran at well under
//! half their speed on 4 KiB pages (`examples/matmul_gflops.rs`). The bench's read probe
//! takes its buffers here too, so it reads through the same pages as the weights it is
//! the ceiling of (the loader maps files for huge pages).

use memmap2::MmapMut;

/// Huge pages are this large (x86-64's 2 MiB); the buffer starts on such a boundary.
const HUGE: usize = 2 << 20;

/// A growable f32 buffer, in an anonymous mapping advised for huge pages when one could be
/// made, else on the heap.
#[derive(Default)]
pub(crate) struct HugeScratch {
    map: Option<MmapMut>,
    heap: Vec<f32>,
    /// The system refused a mapping once: the heap serves from then on, without a system
    /// call per row block.
    refused: bool,
}

impl HugeScratch {
    /// `len` floats for the caller to overwrite (zero, or what an earlier call left),
    /// reusing the buffer when it is large enough.
    pub(crate) fn floats(&mut self, len: usize) -> &mut [f32] {
        let bytes = len.checked_mul(4).filter(|_| !self.refused);
        if let Some(bytes) = bytes {
            let fits = |m: &MmapMut| m.len() >= bytes.saturating_add(HUGE);
            if !self.map.as_ref().is_some_and(fits) {
                self.map = anonymous(bytes);
                self.refused = self.map.is_none();
            }
            if let Some(map) = self.map.as_mut() {
                let start = map.as_ptr().align_offset(HUGE);
                return bytemuck::cast_slice_mut(&mut map[start..start + bytes]);
            }
        }
        self.heap.clear();
        self.heap.resize(len, 0.0);
        &mut self.heap
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
        s.refused = true; // the heap serves a refused system
        let d = s.floats(700);
        assert_eq!(d.len(), 700);
        assert!(d.iter().all(|&v| v == 0.0));
    }
}
