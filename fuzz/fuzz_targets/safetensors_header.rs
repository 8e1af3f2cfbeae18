//! A safetensors file held in memory: length, JSON header, offsets against the data.
//! Nothing may panic; every tensor accepted must lie inside the bytes, without overlap.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(tensors) = llm_anatomy::checkpoint::parse_header(Path::new("fuzz.safetensors"), data) {
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for (_, info, start, end) in &tensors {
            assert!(start <= end && *end <= data.len());
            let n: usize = info.shape.iter().product();
            assert_eq!(end - start, n * info.dtype.size());
            if end > start {
                ranges.push((*start, *end));
            }
        }
        ranges.sort_unstable();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0));
    }
});
