//! `mlprof-collect`. The program is the library's `main` (src/lib.rs), so that the wheel's
//! `mlprof-collect` (crate `wheel/`) is the same compiled code.

fn main() -> std::process::ExitCode {
    mlprof_collector::main()
}
