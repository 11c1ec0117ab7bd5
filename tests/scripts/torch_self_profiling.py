"""A training script that profiles itself: torch.profiler (with and without a schedule),
torch.autograd.profiler.profile, record_function and its own emit_itt. Each writes its own
trace or table; the script prints a digest of what each profiler saw."""
import json
import os
import sys

import torch

out = sys.argv[1]
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def step():
    x = torch.randn(8, 16)
    with torch.profiler.record_function("my_step"):
        loss = model(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()


digest = {}
# 1. torch.profiler.profile without a schedule, exporting a Chrome trace.
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
    for _ in range(3):
        step()
p.export_chrome_trace(os.path.join(out, "plain.json"))
digest["plain"] = sum(1 for e in p.key_averages() if e.key == "my_step" for _ in range(e.count))
# 2. With a schedule (wait 1, warmup 1, active 2), steps driven by p.step().
traces = []
sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
with torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU],
    schedule=sched,
    on_trace_ready=lambda prof: traces.append(prof.key_averages()),
) as p:
    for _ in range(6):
        step()
        p.step()
digest["scheduled"] = sum(e.count for t in traces for e in t if e.key == "my_step")
# 3. The legacy autograd profiler.
with torch.autograd.profiler.profile() as p:
    step()
digest["autograd"] = sum(e.count for e in p.key_averages() if e.key == "my_step")
# 4. The script's own emit_itt.
with torch.autograd.profiler.emit_itt():
    step()
digest["emit_itt"] = "ok"
# 5. Training goes on after all of them.
for _ in range(2):
    step()
json.dump(digest, open(os.path.join(out, "digest.json"), "w"), sort_keys=True)
print("selfprof:", json.dumps(digest, sort_keys=True))
