//! `mlprof`. The program is the library's `main` (src/lib.rs), so that the wheel's `mlprof`
//! (crate `wheel/`) is the same compiled code.

fn main() -> std::process::ExitCode {
    mlprof_tools::main()
}
