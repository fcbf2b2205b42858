//! The command lines of serve's binaries as library code: `serve` and `verify` here are
//! what both the old binaries (serve/src/main.rs, serve/src/bin/verify.rs, kept as
//! aliases) and the `tl serve` / `tl verify` subcommands (tl-cli) run, so the flags and
//! their behaviour exist once. The engine flags themselves are tl-families' `EngineArgs`.

pub mod serve;
pub mod verify;
