//! Builds libmlprof.so for the wheel (feature `bundle-preload`, which pyproject.toml turns on)
//! and leaves it in `OUT_DIR`, where maturin's `include = [{ from = "out-dir" }]` picks it up
//! as `mlprof/libmlprof.so` of the wheel.
//!
//! Why a nested cargo: maturin packages the binaries of one crate, and Cargo has no stable way
//! for a crate to depend on another crate's cdylib (artifact dependencies are nightly-only), so
//! the library is built here, by the same cargo and rustc, for the same target and profile. It
//! gets its own target directory inside `OUT_DIR`: the build that runs this script holds the
//! lock of the workspace's one (a nested build there would wait forever). That directory lives
//! as long as `OUT_DIR`, so the nested build is only paid again when the library's sources change.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Variables cargo sets for this script that describe this package's build, not the nested
/// one. Left in place they would reach the nested build's own build scripts (ittapi-sys's) as
/// stale values, or, for `RUSTC_WORKSPACE_WRAPPER`, run clippy instead of rustc.
fn is_ours(name: &str) -> bool {
    const PREFIXES: &[&str] = &["CARGO_FEATURE_", "CARGO_CFG_", "CARGO_PKG_", "CARGO_MANIFEST_", "DEP_"];
    const NAMES: &[&str] = &[
        "OUT_DIR",
        "TARGET",
        "HOST",
        "NUM_JOBS",
        "OPT_LEVEL",
        "DEBUG",
        "PROFILE",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name)
}

fn var(name: &str) -> String {
    env::var(name).unwrap_or_else(|_| panic!("cargo did not set {name} for the build script"))
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_BUNDLE_PRELOAD").is_none() {
        return;
    }
    let manifest_dir = PathBuf::from(var("CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("wheel/ sits in the workspace root");
    // The library's sources and everything that decides how they build.
    for input in ["preload", "format", "Cargo.toml", "Cargo.lock"] {
        println!("cargo::rerun-if-changed={}", root.join(input).display());
    }
    let out_dir = PathBuf::from(var("OUT_DIR"));
    let target_dir = out_dir.join("preload-target");
    let target = var("TARGET");
    // PROFILE is "release" for release and every profile that inherits it.
    let release = var("PROFILE") == "release";

    let mut cargo = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .arg("rustc")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(["--package", "mlprof-preload", "--lib", "--locked", "--target", &target])
        .arg("--target-dir")
        .arg(&target_dir);
    if release {
        cargo.arg("--release");
    }
    // Like the binaries (pyproject.toml's rustc-args): no debug info in the wheel, symbols kept.
    cargo.args(["--", "-C", "strip=debuginfo"]);
    for (name, _) in env::vars() {
        if is_ours(&name) {
            cargo.env_remove(&name);
        }
    }
    // The nested build shares this build's jobserver (CARGO_MAKEFLAGS), compiler (RUSTC,
    // RUSTC_WRAPPER), flags (CARGO_ENCODED_RUSTFLAGS) and linker settings (maturin --zig sets
    // CARGO_TARGET_<TRIPLE>_LINKER), so the library is built like the binaries next to it.
    let status = cargo.status().unwrap_or_else(|e| panic!("cannot run the nested cargo build: {e}"));
    assert!(
        status.success(),
        "building libmlprof.so for the wheel failed ({status}); see the messages above"
    );

    let built = target_dir.join(&target).join(if release { "release" } else { "debug" }).join("libmlprof.so");
    copy(&built, &out_dir.join("libmlprof.so"));
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", from.display(), to.display()));
}
