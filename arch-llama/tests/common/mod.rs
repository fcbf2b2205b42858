//! Shared by the tests of the dense families (tl-arch-qwen2, -qwen3, -mistral and -gemma3
//! include this file): tl-testkit's helpers, over the including crate's fixtures.
#![allow(dead_code, unused_imports)] // each test binary uses its own subset

pub use tl_testkit::*;

tl_testkit::fixtures!();
