"""Where does a profiled run's CPU time go? `perf record -e cpu-clock` and a classifier.

These VMs have no hardware counters, but the cpu-clock software event works (perf_event_paranoid
2 is enough for a process tree we start). `record()` runs a command under
`perf record -e cpu-clock -F FREQ` (children inherited: the collector, the job and every process
it starts), and `classify()` reads `perf script` and sums the sampled CPU time per category:

    collector          threads named mlprof-collect* (the drain loop, energy sampling, start-up)
    hooks: <kind>      samples in libmlprof.so inside the job's processes, by symbol kind
                       (I/O hooks, clock, ITT ranges / op spans, GPU, recorder)
    torch ITT emission samples in libtorch whose symbol mentions itt / RecordFunction: the cost
                       PyTorch itself pays to call ITT under --torch (emit_itt)
    job kernel         kernel samples in the job's processes
    job user           everything else in the job (interpreter, libtorch, libc, ...)

Python-level hooks (--torch's module and optimizer wrappers) run as interpreter frames and are
part of "job user": Python 3.11 has no perf trampolines, so the report shows them as the
difference of "job user" between the mlprof_torch and mlprof variants.
"""

import collections
import os
import re
import shutil
import subprocess

LINE = re.compile(
    r"^\s*(?P<comm>.+?)\s+(?P<pid>\d+)\s+(?P<period>\d+)\s+[0-9a-f]+\s+(?P<sym>.*?)\s+\((?P<dso>[^()]*)\)\s*$"
)


def available():
    """None when perf can record cpu-clock here, else the reason it cannot."""
    if not shutil.which("perf"):
        return "perf is not installed (linux-perf)"
    try:
        p = subprocess.run(
            ["perf", "record", "-q", "-e", "cpu-clock", "-o", "/dev/null", "--", "true"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"perf record failed: {e}"
    if p.returncode != 0:
        return f"perf record -e cpu-clock failed: {p.stderr.strip()[-200:]}"
    return None


def record_cmd(cmd, out, freq=999):
    return ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(freq), "-o", out, "--"] + cmd


def hook_kind(sym):
    """The kind of a libmlprof.so symbol. Hooks are exported under the intercepted name and the
    recording path is inlined into them, so the exported name says what was being recorded."""
    if "::" in sym or sym.startswith("_ZN") or sym.startswith("mlprof_"):
        return "hooks: recorder, other"
    if "itt" in sym.lower():
        return "hooks: ITT ranges / op spans"
    if sym in ("clock_gettime", "gettimeofday", "time", "__clock_gettime"):
        return "hooks: clock"
    if sym.startswith("nccl") or re.match(r"^cu[A-Z]", sym) or sym.startswith("cuda"):
        return "hooks: GPU"
    return "hooks: libc I/O"


def classify(perf_data):
    """{category: CPU seconds}, {libmlprof symbol: seconds}, total seconds."""
    p = subprocess.run(
        ["perf", "script", "-i", perf_data, "-F", "comm,pid,period,ip,sym,dso"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if p.returncode != 0:
        raise RuntimeError(f"perf script failed: {p.stderr.strip()[-300:]}")
    cats = collections.Counter()
    syms = collections.Counter()
    total = 0
    for line in p.stdout.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        period = int(m["period"])
        total += period
        comm, dso, sym = m["comm"], os.path.basename(m["dso"]), m["sym"]
        if comm.startswith("mlprof-collect") or comm.startswith("mlprof-"):
            cats["collector"] += period
        elif dso.startswith("libmlprof"):
            cats[hook_kind(sym)] += period
            syms[sym] += period
        elif dso.startswith("libtorch") and ("itt" in sym.lower() or "recordfunction" in sym.lower()):
            cats["torch ITT emission"] += period
        elif dso.startswith("[kernel"):
            cats["job kernel"] += period
        else:
            cats["job user"] += period
    ns = 1e9
    return (
        {k: v / ns for k, v in cats.items()},
        {k: v / ns for k, v in syms.most_common(12)},
        total / ns,
    )


CATEGORY_ORDER = [
    "collector",
    "hooks: libc I/O",
    "hooks: clock",
    "hooks: ITT ranges / op spans",
    "hooks: GPU",
    "hooks: recorder, other",
    "torch ITT emission",
    "job kernel",
    "job user",
]
