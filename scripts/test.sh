#!/usr/bin/env bash
# The whole test suite: formatting and lints (Rust: rustfmt, clippy -D warnings, for the
# workspace and the fuzz crate; Python: ruff), the MSRV check, the release build, unit tests, the
# integration tests (real C programs, the CUDA runtime and NCCL wheels, Python/PyTorch workloads
# under the real libmlprof.so) and a bounded fuzzing run of the run-file reader and the ring
# consumer.
#   MLPROF_FUZZ_SECONDS  seconds per fuzz target (default 30; fuzz/run.sh 600 for a long run)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
env_python="$(scripts/python-env.sh)"
MLPROF_TEST_PYTHON="${MLPROF_TEST_PYTHON:-$env_python}"
export MLPROF_TEST_PYTHON
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
# The fuzz crate is its own workspace (nightly-only flags at `cargo fuzz` time), so the two
# commands above do not see it; formatting and lints need no nightly flag.
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo clippy --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings
"$env_python" -m ruff check
"$env_python" -m ruff format --check
python3 scripts/msrv.py
# The size rule of the shipped crates (600 lines a file, 120 a function; issue 34).
python3 scripts/size_check.py
cargo build --release
log="$(mktemp)"
skips="$(mktemp)"
trap 'rm -f "$log" "$skips"' EXIT
# A test that cannot run here (not root, no GPU, MLPROF_SKIP_TORCH=1 without torch) appends
# one `SKIPPED <file>::<test>: <reason>` line to this file (tests/src/skip.rs): it is counted
# as skipped, not passed.
export MLPROF_SKIP_LOG="$skips"
# One line with the totals of every test binary (cargo prints one result line per binary):
# passed excludes the skipped tests; skipped counts them and the #[ignore]d ones (a test that
# skipped and then failed counts as failed only).
totals() {
    awk '
        FNR == NR {
            if ($0 ~ /^test result:/) { p += $4; f += $6; i += $8 }
            else if ($1 == "test" && $NF == "FAILED") failed[$2] = 1
            next
        }
        /^SKIPPED / { name = $2; sub(/^.*::/, "", name); sub(/:$/, "", name); if (!(name in failed)) s++ }
        END { printf "tests: %d passed, %d failed, %d skipped\n", p - s, f, s + i }
    ' "$log" "$skips"
}
status=0
cargo test --workspace --release --no-fail-fast 2>&1 | tee "$log" || status=$?
if [ "$status" -ne 0 ]; then
    totals
    exit "$status"
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install --quiet --locked cargo-fuzz
fi
fuzz/run.sh "${MLPROF_FUZZ_SECONDS:-30}"
totals
