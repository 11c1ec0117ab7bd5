//! Compiles the per-thread state's storage (src/thread_state.c: initial-exec TLS, which stable
//! Rust cannot ask for) and complete mode's untrapped stubs (src/trap/stubs.S, x86_64).

fn main() {
    println!("cargo:rerun-if-changed=src/thread_state.c");
    println!("cargo:rerun-if-changed=src/trap/stubs.S");
    let mut build = cc::Build::new();
    build.file("src/thread_state.c").opt_level(2);
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        build.file("src/trap/stubs.S");
    }
    build.compile("mlprof_thread_state");
}
