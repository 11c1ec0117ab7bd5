#!/usr/bin/env bash
# GPU check of the GPU timeline (issue 35; CUPTI activity records). Needs a machine with an
# NVIDIA GPU, its driver, nvcc and a Python with a CUDA build of torch; about 6 minutes on an
# H200 (TIMELINE_CHECK_ROUNDS=N for more pairs). Run from the repository root after
# `cargo build --release`:
#   MLPROF_BIN_DIR=target/release PYTHON=python3 tests/gpu/timeline_check.sh
# 1. A CUDA program with N launches and M copies: the timeline holds exactly N kernels and M
#    H2D copies, every one linked to its call (unmatched 0), nothing dropped.
# 2. A launch-bound PyTorch loop: mlprof's kernels per step and kernel GPU time per step (from
#    two runs of 10 and 40 steps, so start-up work cancels out) against torch.profiler's over 30
#    steps: within 2 %.
# 3. The same loop profiled by torch.profiler inside `mlprof-collect --gpu-timeline --torch`: the profiler
#    sees as many kernels as without mlprof, and mlprof says it stood down.
# 4. Cost pairs (tests/gpu/timeline_cost.py): the loop (target ≤ 5 %) and ResNet-50 with a JPEG
#    DataLoader (target ≤ 1 %), bare / mlprof-collect / mlprof-collect --gpu-timeline.
# Prints what it measured; exits non-zero when a check fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
BIN="${MLPROF_BIN_DIR:-target/release}"
ROUNDS="${TIMELINE_CHECK_ROUNDS:-4}"
work="$(mktemp -d /tmp/mlprof-timeline-check.XXXXXX)"
# MLPROF_GPU_KEEP=DIR (device_check.sh sets it): the run files and the collectors' stderr go there.
keep() { if [ -n "${MLPROF_GPU_KEEP:-}" ]; then mkdir -p "$MLPROF_GPU_KEEP"; cp "$work"/*.bin "$work"/*.err "$MLPROF_GPU_KEEP/" 2>/dev/null; fi; rm -rf "$work"; }
trap keep EXIT
trap 'exit 143' TERM
nvidia-smi -L || { echo "timeline_check: no NVIDIA GPU visible (nvidia-smi failed)"; exit 2; }
status=0
fail() { echo "timeline_check: FAILED: $*"; status=1; }
timeline() {  # timeline RUN.bin: gpu.timeline of its summary, as JSON
  "$BIN/mlprof" summary --json "$1" | "$PYTHON" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["gpu"]["timeline"]))'
}
field() {  # field JSON PYTHON-EXPRESSION-OF-t
  "$PYTHON" -c "import json,sys; t=json.loads(sys.argv[1]); print($2)" "$1"
}

echo "== 1. CUDA program: kernels = launches, each linked"
if nvcc -O2 -o "$work/timeline_kernels" tests/gpu/timeline_kernels.cu; then
  "$BIN/mlprof-collect" --gpu-timeline --quiet --out "$work/cuda.bin" -- "$work/timeline_kernels" 1000 50 2>"$work/cuda.err" || fail "program under mlprof"
  cat "$work/cuda.err"
  t="$(timeline "$work/cuda.bin")"
  echo "$t" | cut -c1-600
  [ "$(field "$t" 'sum(k["count"] for k in t["kernels"])')" = 1000 ] || fail "kernels != 1000"
  [ "$(field "$t" 't["copies"].get("H2D", {}).get("count")')" = 50 ] || fail "H2D copies != 50"
  [ "$(field "$t" 't["unmatched"]')" = 0 ] || fail "unmatched GPU work"
  [ "$(field "$t" 't["dropped"]')" = 0 ] || fail "dropped GPU activities"
else
  fail "nvcc could not build tests/gpu/timeline_kernels.cu"
fi

echo "== 2. PyTorch loop: kernels and GPU time per step against torch.profiler"
for steps in 10 40; do
  "$BIN/mlprof-collect" --gpu-timeline --quiet --out "$work/torch$steps.bin" -- "$PYTHON" tests/gpu/timeline_torch.py "$steps" >/dev/null \
    2>"$work/torch$steps.err" || fail "timeline_torch.py $steps under mlprof"
  head -c 2000 "$work/torch$steps.err"
done
prof="$("$PYTHON" tests/gpu/timeline_torch.py 30 --profile)" || fail "timeline_torch.py --profile"
echo "$prof"
"$PYTHON" - "$(timeline "$work/torch10.bin")" "$(timeline "$work/torch40.bin")" "$prof" <<'PY' || status=1
import json, sys
short, long, prof = json.loads(sys.argv[1]), json.loads(sys.argv[2]), dict(l.split("=") for l in sys.argv[3].split())
count = lambda t: sum(k["count"] for k in t["kernels"])
gpu_ns = lambda t: sum(k["gpu_ns"] for k in t["kernels"])
ours = ((count(long) - count(short)) / 30, (gpu_ns(long) - gpu_ns(short)) / 30)
theirs = (int(prof["profiler_kernels"]) / 30, int(prof["profiler_kernel_ns"]) / 30)
ok = True
for what, a, b in (("kernels per step", *ours[:1], *theirs[:1]), ("kernel GPU ns per step", ours[1], theirs[1])):
    off = (a - b) / b * 100 if b else float("inf")
    print(f"{what}: mlprof {a:.1f}, torch.profiler {b:.1f} ({off:+.2f} %)")
    ok &= abs(off) <= 2.0
print("within 2 %" if ok else "timeline_check: FAILED: more than 2 % apart")
sys.exit(0 if ok else 1)
PY

echo "== 3. torch.profiler inside mlprof-collect --gpu-timeline --torch"
alone="$(sed -n 's/^profiler_kernels=//p' <<<"$prof")"  # part 2's run, alone
inside="$("$BIN/mlprof-collect" --gpu-timeline --torch --out "$work/inside.bin" -- "$PYTHON" tests/gpu/timeline_torch.py 30 --profile 2>"$work/inside.err" | sed -n 's/^profiler_kernels=//p')"
echo "torch.profiler kernels: alone $alone, inside mlprof $inside"
grep -m1 "another tool holds CUPTI" "$work/inside.err" || { echo "(mlprof did not say it stood down)"; head -c 2000 "$work/inside.err"; }
[ -n "$alone" ] && [ "$alone" = "$inside" ] || fail "torch.profiler saw $inside kernels inside mlprof, $alone alone"

echo "== 4. cost pairs"
"$PYTHON" tests/gpu/timeline_cost.py --job cnn --rounds "$ROUNDS" --steps 2000 --bin-dir "$BIN" --python "$PYTHON" || fail "cnn cost"
"$PYTHON" tests/gpu/timeline_cost.py --job resnet50 --rounds "$ROUNDS" --steps 60 --bin-dir "$BIN" --python "$PYTHON" || fail "resnet50 cost"
echo "timeline_check: $([ $status = 0 ] && echo PASSED || echo FAILED)"
exit $status
