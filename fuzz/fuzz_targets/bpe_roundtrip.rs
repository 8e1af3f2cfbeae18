//! BPE encode then decode is the identity (Qwen's vocabulary, no normaliser), with and
//! without added-token recognition, and the parallel encoder gives the same ids.
#![no_main]
use libfuzzer_sys::fuzz_target;
use llm_anatomy::tokenizer::Tokenizer;
use std::sync::OnceLock;

static TOK: OnceLock<Tokenizer> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    // Without the NFC step, so decoding must give back the very text (with it, the NFC form).
    let tok = TOK.get_or_init(|| {
        let mut t = Tokenizer::qwen().expect("data/qwen.tiktoken");
        t.nfc = false;
        t
    });
    let text = String::from_utf8_lossy(data);
    let ids = tok.encode(&text).unwrap();
    assert_eq!(tok.decode(&ids).unwrap(), text);
    let plain = tok.encode_ordinary(&text).unwrap();
    assert_eq!(tok.decode(&plain).unwrap(), text);
    assert_eq!(tok.encode_parallel(&text).unwrap(), ids);
});
