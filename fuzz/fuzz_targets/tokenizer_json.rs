//! A Hugging Face tokenizer.json through the tokenizer loader; an accepted one must
//! encode and decode without panicking (NFC may change the text, so no round trip).
#![no_main]
use libfuzzer_sys::fuzz_target;
use llm_anatomy::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    if let Ok(tok) = Tokenizer::from_bytes(data, true, "fuzz/tokenizer.json") {
        for text in ["hello world", "a\u{301}b  12\n", ""] {
            if let Ok(ids) = tok.encode(text) {
                let _ = tok.decode(&ids);
            }
        }
    }
});
