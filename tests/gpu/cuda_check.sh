#!/usr/bin/env bash
# GPU check for the CUDA/NCCL hooks (issue: GPU entry points). Needs a machine with an NVIDIA
# GPU and driver; finishes in well under 5 minutes. Run from the repository root after
# `cargo build --release`, with a Python that has a CUDA build of torch:
#   PYTHON=/path/to/python tests/gpu/cuda_check.sh
# It runs a short PyTorch CUDA training loop (plus one single-rank NCCL all-reduce when the
# NCCL backend can start) under mlprof-collect and asserts, from `mlprof summary --json` and
# the Chrome trace: kernel launches with names, copies with bytes in both directions, and
# synchronizations with host-blocked time. Prints what it measured; exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
BIN="${MLPROF_BIN_DIR:-target/release}"
work="$(mktemp -d /tmp/mlprof-cuda-check.XXXXXX)"
trap 'rm -rf "$work"' EXIT

nvidia-smi -L || { echo "cuda_check: no NVIDIA GPU visible (nvidia-smi failed)"; exit 2; }

cat > "$work/train_cuda.py" <<'PY'
import os, sys, time
import torch
import torch.nn as nn
assert torch.cuda.is_available(), "torch sees no CUDA device"
dev = torch.device("cuda:0")
model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x_host = torch.randn(256, 1024).pin_memory()
y_host = torch.randint(0, 10, (256,))
for step in range(50):
    x = x_host.to(dev, non_blocking=True)
    y = y_host.to(dev)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print("step", step, "loss", loss.item())   # .item(): a device-to-host copy + sync
torch.cuda.synchronize()
try:
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    t = torch.ones(1 << 20, device=dev)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("nccl all_reduce ok")
except Exception as e:  # NCCL is optional for this check
    print("nccl skipped:", e)
PY

start=$(date +%s)
# MLPROF_COLLECT_ARGS: extra collector flags (device_check.sh runs it again with --all-syscalls).
# shellcheck disable=SC2086
"$BIN/mlprof-collect" ${MLPROF_COLLECT_ARGS:-} --out "$work/run.bin" -- "$PYTHON" "$work/train_cuda.py"
"$BIN/mlprof" summary "$work/run.bin" | sed -n '/^GPU/,/^Top files/p'
"$BIN/mlprof" summary --json "$work/run.bin" > "$work/summary.json"
"$BIN/mlprof" convert "$work/run.bin" -o "$work/trace.json"
if [ -n "${MLPROF_GPU_KEEP:-}" ]; then mkdir -p "$MLPROF_GPU_KEEP"; cp "$work/run.bin" "$MLPROF_GPU_KEEP/cuda_check${MLPROF_COLLECT_ARGS:+_more}_run.bin"; fi
"$PYTHON" - "$work/summary.json" "$work/trace.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); t = json.load(open(sys.argv[2]))
gpu = s.get("gpu") or {}
apis = gpu.get("apis", {})
launches = sum(v["count"] for k, v in apis.items() if "LaunchKernel" in k)
kernels = gpu.get("kernels", [])
named = [k for k in kernels if not k["name"].startswith("kernel@")]
named_launches = sum(k["launches"] for k in named)
all_launches = sum(k["launches"] for k in kernels)
copies = gpu.get("copies", {})
syncs = sum(v["count"] for k, v in apis.items() if "Synchronize" in k)
nccl = {k: v["count"] for k, v in apis.items() if k.startswith("nccl")}
print(f"launches={launches} kernels={len(kernels)} named={len(named)} copies={copies} syncs={syncs} "
      f"host_blocked_ns={gpu.get('host_blocked_ns')} nccl={nccl} dropped={s['dropped']}")
for k in kernels[:5]:
    print("  kernel", k["launches"], k["name"][:100])
ok = True
def check(cond, what):
    global ok
    print(("PASS " if cond else "FAIL ") + what)
    ok &= cond
check(launches > 0, "kernel launches recorded")
# PyTorch's own kernels (CUkernel handles of the CUDA 12+ runtime) and cuBLAS's alike.
check(all_launches > 0 and named_launches >= 0.95 * all_launches,
      f"kernels have names ({named_launches} of {all_launches} launches, {len(named)} of {len(kernels)} kernels)")
check(copies.get("H2D", {}).get("bytes", 0) > 0, "host-to-device copies with bytes")
check(copies.get("D2H", {}).get("bytes", 0) > 0, "device-to-host copies with bytes")
check(syncs > 0 and gpu.get("host_blocked_ns", 0) > 0, "synchronizations with host-blocked time")
check(s["dropped"] == 0, "no dropped records")
ev = [e for e in t["traceEvents"] if e.get("ph") == "X" and "LaunchKernel" in e.get("name", "")]
check(any(e["args"].get("kernel") for e in ev), "trace launches carry kernel names")
sys.exit(0 if ok else 1)
PY
echo "cuda_check: done in $(( $(date +%s) - start )) s"
