#!/usr/bin/env bash
# fuzz/run.sh [SECONDS]: runs each cargo-fuzz target for SECONDS (default 60) and fails on the
# first crash, hang (> 10 s per input) or allocation above 64 MiB.  Needs cargo-fuzz
# (`cargo install cargo-fuzz`); works on a stable toolchain through RUSTC_BOOTSTRAP=1 (cargo
# fuzz passes nightly-only -Z flags).  Corpora are kept in fuzz/corpus/<target> (ignored).
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
export RUSTC_BOOTSTRAP="${RUSTC_BOOTSTRAP:-1}"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "fuzz/run.sh: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
    exit 2
fi
mkdir -p corpus/runfile corpus/ring
# Seed the run-file corpus with real run files when there are some (small ones only).
for f in ../run.bin ../target/*.bin seeds/*.mlrun; do
    if [ -f "$f" ] && [ "$(stat -c %s "$f")" -lt 1000000 ]; then
        cp "$f" "corpus/runfile/seed-$(basename "$f")"
    fi
done
targets=(runfile ring)
# Inputs that once crashed or hung a target are replayed first, as part of its corpus.
for target in "${targets[@]}"; do
    if [ -d "regressions/$target" ]; then
        cp regressions/"$target"/* "corpus/$target/" 2>/dev/null || true
    fi
done
cargo fuzz build --release
for target in "${targets[@]}"; do
    echo "== fuzz target $target: ${seconds} s"
    cargo fuzz run --release "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -malloc_limit_mb=64 \
        -max_len=65536 -print_final_stats=1 2>&1 | tee "fuzz-$target.log" | grep -E "^(#|==|stat::|INFO: Running|Done)|panicked|ERROR|SUMMARY" || true
    if grep -qE "ERROR: libFuzzer|panicked|SUMMARY: (Address|Undefined|Leak)Sanitizer" "fuzz-$target.log"; then
        echo "fuzz/run.sh: target $target failed; see fuzz/fuzz-$target.log and fuzz/artifacts/$target" >&2
        exit 1
    fi
done
echo "fuzz/run.sh: all targets ran ${seconds} s without a failure"
