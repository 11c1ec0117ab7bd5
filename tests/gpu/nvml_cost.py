#!/usr/bin/env python3
"""What each NVML query the energy sampler makes costs on this machine, and how often the
energy counter moves (needs an NVIDIA GPU and libnvidia-ml.so.1; about 20 s).

For each query: wall and CPU time (this thread's, CLOCK_THREAD_CPUTIME_ID) per call, median and
90th percentile over --calls calls, with the GPU idle and then busy (matrix products in a child
process). Then the energy counter read every 2 ms for 2 s: the time between changes of its value
(its update period, which bounds what a shorter sampling interval can add).

    tests/gpu/nvml_cost.py [--gpu 0] [--calls 200]
"""

import argparse
import ctypes
import statistics
import subprocess
import sys
import time


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class MemoryV2(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("total", ctypes.c_ulonglong),
        ("reserved", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class Value(ctypes.Union):
    _fields_ = [
        ("d", ctypes.c_double),
        ("ui", ctypes.c_uint),
        ("ul", ctypes.c_ulong),
        ("ull", ctypes.c_ulonglong),
        ("sll", ctypes.c_longlong),
        ("si", ctypes.c_int),
        ("us", ctypes.c_ushort),
    ]


class FieldValue(ctypes.Structure):
    _fields_ = [
        ("fieldId", ctypes.c_uint),
        ("scopeId", ctypes.c_uint),
        ("timestamp", ctypes.c_longlong),
        ("latencyUsec", ctypes.c_longlong),
        ("valueType", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_uint),
        ("value", Value),
    ]


FI_TOTAL_ENERGY = 83
FI_POWER_INSTANT = 186


def measure(name, fn, calls):
    walls, cpus, rcs = [], [], set()
    for _ in range(calls):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        rcs.add(fn())
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        walls.append(w1 - w0)
        cpus.append(c1 - c0)

    def q(xs):
        return statistics.median(xs) / 1e3, sorted(xs)[int(0.9 * (len(xs) - 1))] / 1e3

    (wm, w9), (cm, c9) = q(walls), q(cpus)
    print(
        f"  {name:34} wall {wm:9.1f} µs (p90 {w9:9.1f})   cpu {cm:9.1f} µs (p90 {c9:9.1f})   rc {sorted(rcs)}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    dev = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(args.gpu, ctypes.byref(dev)) == 0
    mj, mw, clock, temp = ctypes.c_ulonglong(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    util, mem, mem2 = Utilization(), Memory(), MemoryV2()
    mem2.version = ctypes.sizeof(MemoryV2) | (2 << 24)  # nvmlMemory_v2
    fields = (FieldValue * 2)()

    def field_values():
        fields[0].fieldId, fields[1].fieldId = FI_TOTAL_ENERGY, FI_POWER_INSTANT
        return nvml.nvmlDeviceGetFieldValues(dev, 2, fields)

    def instant_power():
        fields[0].fieldId = FI_POWER_INSTANT
        rc = nvml.nvmlDeviceGetFieldValues(dev, 1, fields)
        return rc if rc else fields[0].nvmlReturn

    queries = [
        (
            "GetTotalEnergyConsumption",
            lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(dev, ctypes.byref(mj)),
        ),
        ("GetPowerUsage", lambda: nvml.nvmlDeviceGetPowerUsage(dev, ctypes.byref(mw))),
        ("GetUtilizationRates", lambda: nvml.nvmlDeviceGetUtilizationRates(dev, ctypes.byref(util))),
        ("GetClockInfo(SM)", lambda: nvml.nvmlDeviceGetClockInfo(dev, 1, ctypes.byref(clock))),
        ("GetMemoryInfo", lambda: nvml.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(mem))),
        # What nvml-wrapper (so mlprof-collect) calls for memory used.
        ("GetMemoryInfo_v2", lambda: nvml.nvmlDeviceGetMemoryInfo_v2(dev, ctypes.byref(mem2))),
        ("GetTemperature(GPU)", lambda: nvml.nvmlDeviceGetTemperature(dev, 0, ctypes.byref(temp))),
        ("GetFieldValues(energy, power)", field_values),
        ("GetFieldValues(instant power)", instant_power),
    ]
    print("NVML per-call cost, GPU idle:")
    for name, fn in queries:
        measure(name, fn, args.calls)
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import torch, time\n"
                "a = torch.randn(8192, 8192, device='cuda', dtype=torch.float16)\n"
                "end = time.monotonic() + 12\n"
                "while time.monotonic() < end:\n"
                "    for _ in range(10): a @ a\n"
                "    torch.cuda.synchronize()\n"
            ),
        ]
    )
    time.sleep(4)
    print("NVML per-call cost, GPU busy (matrix products in another process):")
    for name, fn in queries:
        measure(name, fn, args.calls)
    changes, last, t_end = [], None, time.monotonic() + 2
    while time.monotonic() < t_end:
        nvml.nvmlDeviceGetTotalEnergyConsumption(dev, ctypes.byref(mj))
        now = time.monotonic_ns()
        if last is not None and mj.value != last:
            changes.append(now)
        last = mj.value
        time.sleep(0.002)
    gaps = [(b - a) / 1e6 for a, b in zip(changes, changes[1:])]
    if gaps:
        print(
            f"energy counter (busy GPU): {len(changes)} changes in 2 s, median {statistics.median(gaps):.1f} ms "
            f"between changes (min {min(gaps):.1f}, max {max(gaps):.1f})"
        )
    busy.wait()
    nvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
