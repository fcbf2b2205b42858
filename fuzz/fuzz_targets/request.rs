//! The server's request parsing, as OpenAI's routes and as Anthropic's `/v1/messages` and
//! as `/v1/responses`: see `checks::request`, `checks::messages_request` and
//! `checks::responses_request` (fuzz/checks.rs), shared with the
//! stable regression test.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::request(data);
    checks::messages_request(data);
    checks::responses_request(data);
});
