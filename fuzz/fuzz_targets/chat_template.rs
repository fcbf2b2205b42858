//! The chat-template renderer with hostile templates: the input is `template \0 content`;
//! compile the template and render a conversation holding the content. Errors are fine;
//! panics, hangs and unbounded output are not.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tl_core::{ChatTemplate, Message};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (source, content) = text.split_once('\0').unwrap_or((&text, "hello"));
    let tokens = vec![("bos_token".to_string(), "<s>".to_string()), ("eos_token".to_string(), "</s>".to_string())];
    let Ok(t) = ChatTemplate::new(source, tokens) else { return };
    let msgs = [Message::new("system", "be brief"), Message::new("user", content), Message::new("assistant", content)];
    if let Ok(out) = t.render(&msgs, true) {
        assert!(out.len() <= tl_core::chat::MAX_OUTPUT_BYTES, "output past the bound");
    }
});
