#!/usr/bin/env bash
# Builds mlprof and profiles the example training job end to end:
# run.bin (the recording), the summary on the terminal, and run.pftrace (Perfetto's protobuf
# trace: open it in https://ui.perfetto.dev).
set -euo pipefail
cd "$(dirname "$0")/.."
python="$(scripts/python-env.sh)"
cargo build --release
work="${MLPROF_DEMO_DIR:-/tmp/mlprof-demo}"
mkdir -p "$work"
target/release/mlprof-collect --out run.bin -- \
    "$python" examples/train.py --data "$work/images" --out "$work/checkpoint.pt"
target/release/mlprof summary run.bin
target/release/mlprof convert run.bin
