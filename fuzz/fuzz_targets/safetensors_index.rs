//! model.safetensors.index.json: the tensor → shard map. Shard names must stay plain
//! file names inside the model directory.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let index = Path::new("model/model.safetensors.index.json");
    if let Ok((files, map)) = llm_anatomy::checkpoint::parse_index(data, index) {
        assert!(!files.is_empty());
        for f in files.iter().chain(map.values()) {
            assert_eq!(f.parent(), Some(Path::new("model")), "{f:?}");
        }
    }
});
