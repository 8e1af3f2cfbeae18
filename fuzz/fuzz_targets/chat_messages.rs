//! A `--messages` conversation file rendered with the Qwen3 chat template, every option.
#![no_main]
use libfuzzer_sys::fuzz_target;
use llm_anatomy::chat::ChatOptions;
use llm_anatomy::chat::template::parse_conversation;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = parse_conversation(text, "messages.json") {
        for add_generation_prompt in [false, true] {
            for enable_thinking in [None, Some(false), Some(true)] {
                let _ = c.render(&ChatOptions { add_generation_prompt, enable_thinking });
            }
        }
    }
});
