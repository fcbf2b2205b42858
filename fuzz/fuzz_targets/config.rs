//! config.json parsing: see `checks::config` (fuzz/checks.rs), shared with the stable regression test.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tl_arch_gemma3 as _;
use tl_arch_gpt_oss as _;
use tl_arch_qwen3_5 as _;
use tl_arch_gemma4 as _;
use tl_arch_llama as _;
use tl_arch_mistral as _;
use tl_arch_mixtral as _;
use tl_arch_olmoe as _;
use tl_arch_qwen2 as _;
use tl_arch_qwen3 as _;
use tl_arch_qwen3_moe as _;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    checks::config(data);
});
