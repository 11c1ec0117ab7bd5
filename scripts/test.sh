#!/usr/bin/env bash
# The whole test suite: formatting, lints, the release build, unit tests and the integration
# tests (real C programs and Python/PyTorch workloads under the real libmlprof.so).
set -euo pipefail
cd "$(dirname "$0")/.."
MLPROF_TEST_PYTHON="${MLPROF_TEST_PYTHON:-$(scripts/python-env.sh)}"
export MLPROF_TEST_PYTHON
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings
cargo build --release
cargo test --workspace --release
