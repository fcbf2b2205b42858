//! tl: the one command (tl-cli's lib holds the subcommands).

fn main() -> std::process::ExitCode {
    tl_cli::main()
}
