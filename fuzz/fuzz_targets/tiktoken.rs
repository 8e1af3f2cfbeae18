//! A tiktoken vocabulary file (`base64 rank` lines) through the tokenizer loader; an
//! accepted vocabulary must round-trip a short text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use llm_anatomy::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    if let Ok(tok) = Tokenizer::from_bytes(data, false, "fuzz.tiktoken") {
        let text = "hello, world 123 <|im_start|> é";
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
});
