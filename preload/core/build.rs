//! Compiles the per-thread state's storage (src/thread_state.c: initial-exec TLS, which stable
//! Rust cannot ask for) and complete mode's untrapped stubs (src/trap/stubs.S, x86_64), and
//! says whether our code keeps frame pointers (`cfg(mlprof_frame_pointers)`).

fn main() {
    // The native caller reader (src/caller.rs) follows our own frame-pointer chain: on only when
    // every function of ours keeps one (`.cargo/config.toml`; a build with its own RUSTFLAGS,
    // such as the fuzzers', may not).
    println!("cargo::rustc-check-cfg=cfg(mlprof_frame_pointers)");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    // The last `force-frame-pointers` flag wins, as in rustc; `-C` may be its own argument.
    let frame_pointers = flags
        .split('\x1f')
        .rev()
        .find_map(|flag| flag.trim_start_matches("-C").strip_prefix("force-frame-pointers"))
        .is_some_and(|value| matches!(value, "" | "=yes" | "=y" | "=on" | "=true"));
    if frame_pointers {
        println!("cargo::rustc-cfg=mlprof_frame_pointers");
    }
    println!("cargo:rerun-if-changed=src/thread_state.c");
    println!("cargo:rerun-if-changed=src/trap/stubs.S");
    let mut build = cc::Build::new();
    build.file("src/thread_state.c").opt_level(2);
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        build.file("src/trap/stubs.S");
    }
    build.compile("mlprof_thread_state");
}
