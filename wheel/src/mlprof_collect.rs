//! The wheel's `mlprof-collect`: the collector crate's program.

fn main() -> std::process::ExitCode {
    mlprof_collector::main()
}
