//! verify: show that a seeded request's answer depends on nothing but the request.
//! Deprecated alias of `tl verify`, kept for one release so scripts keep working; the
//! command lives in tl_serve::cmd::verify.

fn main() -> std::process::ExitCode {
    tl_serve::cmd::verify::main()
}
