//! convert: deprecated alias of `tl convert` (tl-cli), kept for one release so scripts that call
//! it keep working; the flags and behaviour are the subcommand's.

fn main() -> std::process::ExitCode {
    tl_examples::link();
    tl_cli::convert::main()
}
