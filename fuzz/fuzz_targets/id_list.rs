//! The command line's id lists (`1,2,5-9`): bounded, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data)
        && let Ok(ids) = llm_anatomy::tokenizer::parse_id_ranges(s)
    {
        assert!(ids.len() <= 1 << 24);
    }
});
