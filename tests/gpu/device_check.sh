#!/usr/bin/env bash
# One prepared run on a machine with an NVIDIA GPU: what NVML's queries cost, the CUDA/NCCL hook
# check, the energy check, and a --torch CUDA training job's overhead against bare (with the
# variants that split it), in that order; each part's output is kept even when an earlier part
# fails. DEVICE_CHECK_PARTS=name,name runs only those parts. Built here, run there (no Rust needed there):
#   MLPROF_BIN_DIR=dir-with-mlprof,mlprof-collect,libmlprof.so PYTHON=python3 tests/gpu/device_check.sh [OUTDIR]
# OUTDIR (default $OUT, else a temporary folder) receives device_check.log and the run files.
# Budget: about 13 minutes on an H100/H200 (timeline_check 6 of them). Exits non-zero when any part failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
export MLPROF_BIN_DIR="$(cd "${MLPROF_BIN_DIR:-target/release}" && pwd)"
export PYTHON="${PYTHON:-python3}"
export MLPROF_TEST_PYTHON="$PYTHON"
out="${1:-${OUT:-$(mktemp -d)}}"
mkdir -p "$out"
export MLPROF_GPU_KEEP="$out"
log="$out/device_check.log"
status=0
parts=",${DEVICE_CHECK_PARTS:-timeline_check,sites_check,nvml_cost,cuda_check,cuda_check_all_syscalls,energy_check,torch_step_cost,torch_cuda_overhead},"
part() {  # part NAME TIMEOUT_S CMD...
  local name="$1" limit="$2"; shift 2
  case "$parts" in *",$name,"*) ;; *) echo "===== $name: not asked for (DEVICE_CHECK_PARTS)"; return;; esac
  echo "===== $name ($(date -u +%H:%M:%S), limit ${limit} s)"
  local t0=$SECONDS rc=0
  PYTHONUNBUFFERED=1 timeout "$limit" "$@" || rc=$?
  echo "===== $name: rc $rc in $((SECONDS - t0)) s"
  [ "$rc" = 0 ] || status=1
}
exec > >(tee "$log") 2>&1
echo "device_check: $(date -u +%FT%TZ) on $(uname -srm)"
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv || true
"$PYTHON" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' || true
"$MLPROF_BIN_DIR/mlprof-collect" --version
# The GPU timeline (issue 35) first: never run on a GPU yet (about 6 minutes).
part timeline_check 420 tests/gpu/timeline_check.sh
# Call sites (issue 36) under the machine's CPython (3.12 on the H200 image): a few seconds.
part sites_check 60 "$PYTHON" tests/gpu/sites_check.py --bin-dir "$MLPROF_BIN_DIR" "$PYTHON"
part nvml_cost 60 "$PYTHON" tests/gpu/nvml_cost.py --calls 60
part cuda_check 150 tests/gpu/cuda_check.sh
MLPROF_COLLECT_ARGS=--all-syscalls part cuda_check_all_syscalls 150 tests/gpu/cuda_check.sh
part energy_check 120 tests/gpu/energy_check.sh 0
# --torch's parts switched on and off inside one process (steadier than process pairs), under the
# collector and without it (PyTorch's own share of the op ranges).
# torch.profiler recording CPU ops (prof) in the same rounds: issue 10's yardstick for op spans.
part torch_step_cost 150 "$MLPROF_BIN_DIR/mlprof-collect" --no-energy \
  --out "${TMPDIR:-/tmp}/step_cost_run.bin" -- "$PYTHON" tests/gpu/torch_step_cost.py --rounds 12 --block 30 \
  --variants bare,ops,prof,full
part torch_step_cost 90 "$PYTHON" tests/gpu/torch_step_cost.py --rounds 12 \
  --block 30 --variants bare,ops
# DEVICE_CHECK_ROUNDS / DEVICE_CHECK_VARIANTS widen the overhead part when a session has the time
# (each round is ~10 s a variant plus bare on an H200).
rounds="${DEVICE_CHECK_ROUNDS:-4}"
# (plain-itt-early, emit_itt from the first line, added nothing visible to plain-itt on the H200.)
variants="${DEVICE_CHECK_VARIANTS:-torch,torch-noops,plain-itt}"
part torch_cuda_overhead $((60 + rounds * 15 * (1 + $(tr -cd , <<<"$variants" | wc -c) + 1))) \
  "$PYTHON" tests/gpu/torch_cuda_overhead.py --rounds "$rounds" --steps 200 \
  --variants "$variants" --keep "$out"
# Files that come back from a device machine are limited to 16 MiB each.
for f in "$out"/*.bin; do [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 15000000 ] && gzip -1 "$f"; done
echo "device_check: $([ $status = 0 ] && echo ALL PARTS PASSED || echo SOME PART FAILED)"
exit $status
