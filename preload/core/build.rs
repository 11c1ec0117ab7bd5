//! Compiles the per-thread state's storage (src/thread_state.c: initial-exec TLS, which stable
//! Rust cannot ask for).

fn main() {
    println!("cargo:rerun-if-changed=src/thread_state.c");
    cc::Build::new().file("src/thread_state.c").opt_level(2).compile("mlprof_thread_state");
}
