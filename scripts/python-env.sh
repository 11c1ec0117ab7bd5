#!/usr/bin/env bash
# Creates (or reuses) the Python virtual environment the examples and tests use, with PyTorch
# and torchvision from the package index, and prints its python path on stdout.
# The environment lives outside the clone (default ~/.cache/mlprof-venv, or $MLPROF_VENV) so
# CI runs reuse it; it is recreated whenever it is missing or broken.
set -euo pipefail
venv="${MLPROF_VENV:-$HOME/.cache/mlprof-venv}"
python="$venv/bin/python"
if ! "$python" -c 'import torch, torchvision, PIL' >/dev/null 2>&1; then
    echo "python-env: installing torch, torchvision and pillow into $venv (about a minute)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$python" -m pip install --quiet --disable-pip-version-check torch torchvision pillow numpy >&2
fi
# Intel's ittapi package (ITT tasks from Python), added after the environment's first version.
if ! "$python" -c 'import ittapi' >/dev/null 2>&1; then
    "$python" -m pip install --quiet --disable-pip-version-check ittapi >&2
fi
# Perfetto's compiled trace protos and protobuf: tests/scripts/perfetto_check.py decodes the
# traces of `mlprof convert` with them, offline.
if ! "$python" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2, google.protobuf' >/dev/null 2>&1; then
    "$python" -m pip install --quiet --disable-pip-version-check perfetto protobuf >&2
fi
# DuckDB, PySpark (local mode, on the machine's Java 17) and pyarrow read the Parquet that
# `mlprof export` writes (tests/tests/scale.rs, tests/scripts/query_export.py).
if ! "$python" -c 'import duckdb, pyspark, pyarrow' >/dev/null 2>&1; then
    "$python" -m pip install --quiet --disable-pip-version-check duckdb pyspark pyarrow >&2
fi
# ruff lints and formats the repository's Python (scripts/test.sh); pinned so CI asks the same.
if [ "$("$python" -m ruff --version 2>/dev/null)" != "ruff 0.17.6" ]; then
    "$python" -m pip install --quiet --disable-pip-version-check ruff==0.17.6 >&2
fi
echo "$python"
