//! The server's request parsing: the body as JSON into the request type, every field's
//! checks (`plan`) for chat and completions, and message content.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tl_serve::api::{content_text, Body};

fuzz_target!(|data: &[u8]| {
    let Ok(b) = serde_json::from_slice::<Body>(data) else { return };
    for chat in [true, false] {
        if let Ok(plan) = b.plan(vec![1, 2, 3], chat, Some(2048), 16) {
            assert!(!plan.reqs.is_empty() && plan.reqs.len() <= 16);
            assert!(plan.reqs.iter().all(|r| r.max_tokens >= 1 && r.max_tokens + 3 <= 2048));
        }
    }
    for m in b.messages.iter().flatten() {
        let _ = content_text(&m.content);
    }
});
