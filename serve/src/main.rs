//! serve: an OpenAI-compatible server for a tl model. Deprecated alias of `tl serve`, kept
//! for one release so scripts keep working; the command lives in tl_serve::cmd::serve.

fn main() -> std::process::ExitCode {
    tl_serve::cmd::serve::main()
}
