"""torch.profiler.itt ranges and marks, with no mlprof code and no --torch:
N times: range_push("mlprof.outer"), range_push("mlprof.inner"), pop, pop, mark("mlprof.tick").

    torch_itt_ranges.py N
"""
import sys

import torch

n = int(sys.argv[1])
itt = torch.profiler.itt
assert itt.is_available(), "this torch has no ITT support"
for _ in range(n):
    itt.range_push("mlprof.outer")
    itt.range_push("mlprof.inner")
    itt.range_pop()
    itt.range_pop()
    itt.mark("mlprof.tick")
print("torch_itt_ranges: %d" % n)
