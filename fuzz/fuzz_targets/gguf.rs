//! A GGUF file held in memory (`gguf::parse`). Nothing may panic; every tensor accepted
//! lies inside the bytes, aligned, in order and without overlap, of the size its type and
//! dimensions give; and what was read, written again by `GgufWriter`, reads back the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use llm_anatomy::gguf::{GgufWriter, parse};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = parse(Path::new("fuzz.gguf"), data) else {
        return;
    };
    assert!(p.alignment.is_power_of_two());
    let mut end = 0u64;
    for t in &p.tensors {
        assert!(t.offset % p.alignment == 0 && t.offset >= end);
        let ne0 = t.dims.first().copied().unwrap_or(1);
        let rows = t.dims.iter().skip(1).product::<u64>();
        assert_eq!(Some(t.size), t.ty.row_bytes(ne0).map(|r| r * rows));
        end = t.offset + t.size;
        assert!(p.data_offset % p.alignment == 0 && p.data_offset + end <= data.len() as u64);
    }
    // Padding to a huge alignment would write gigabytes: round-trip the usual ones.
    if p.alignment > 1 << 16 {
        return;
    }
    let infos = p.tensors.iter().map(|t| (t.name.clone(), t.dims.clone(), t.ty)).collect();
    let mut w = GgufWriter::new(Vec::new(), p.metadata.clone(), infos, p.alignment)
        .expect("what was read can be written");
    for t in &p.tensors {
        let start = (p.data_offset + t.offset) as usize;
        w.write_tensor(&t.name, &data[start..start + t.size as usize]).unwrap();
    }
    let out = w.finish().unwrap();
    let again = parse(Path::new("rewritten.gguf"), &out).expect("our own file reads");
    // Debug strings, so a NaN compares equal to itself.
    assert_eq!(format!("{:?}", again.metadata), format!("{:?}", p.metadata));
    assert_eq!(again.tensors.len(), p.tensors.len());
    assert_eq!(again.version, 3);
});
