"""Intel's ittapi package: N x task "py.outer" { task "py.inner" } in domain "ittapi.test",
then pause/resume.  usage: ittapi_tasks.py N"""
import sys

import ittapi

n = int(sys.argv[1])
domain = ittapi.domain("ittapi.test")
for _ in range(n):
    with ittapi.task("py.outer", domain=domain):
        with ittapi.task("py.inner", domain=domain):
            pass
ittapi.pause()
ittapi.resume()
