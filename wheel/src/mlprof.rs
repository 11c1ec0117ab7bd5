//! The wheel's `mlprof`: the tools crate's program.

fn main() -> std::process::ExitCode {
    mlprof_tools::main()
}
