#!/usr/bin/env python3
"""Call sites under other CPythons (issue 36): runs tests/scripts/sites.py under
`mlprof-collect --sites` with each Python given and checks, as tests/tests/sites.rs does under
the test environment's Python, the exact number of calls per (file, line, function) at each
line marked `# site: NAME`. For machines with another CPython at hand (the GPU machines have
3.12; pyenv installs any):

    sites_check.py [--bin-dir DIR] PYTHON...

Prints one line per check; exits non-zero when one fails.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "sites.py")
N = 7


def marks():
    with open(SCRIPT) as f:
        return {line.split("# site: ")[1].strip(): at for at, line in enumerate(f, 1) if "# site: " in line}


def check(python, bin_dir):
    """The failures of one interpreter's run (empty: all held)."""
    folder = tempfile.mkdtemp(prefix="mlprof-sites-check-")
    run = os.path.join(folder, "run.bin")
    script = os.path.realpath(SCRIPT)
    cmd = [os.path.join(bin_dir, "mlprof-collect"), "--sites", "--quiet", "--out", run, "--"]
    done = subprocess.run(cmd + [python, script, folder, str(N)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return [f"exit status {done.returncode}: {done.stderr[-800:]}"]
    comprehension = done.stdout.split("comprehension_function=")[1].split()[0]
    method = done.stdout.split("method_function=")[1].split()[0]
    summary = subprocess.run(
        [os.path.join(bin_dir, "mlprof"), "summary", "--json", run],
        capture_output=True,
        text=True,
        check=True,
    )
    sites = json.loads(summary.stdout)["sites"]
    line_of = marks()
    want = [
        ("function", "stat_loop", N + 1),
        ("method", method, N + 2),
        ("generator", "sizes", N),
        ("comprehension", comprehension, N),
        ("thread", "in_thread", N + 4),
        ("missing", "missing", N + 5),
        ("worker", "worker", 2 * (N + 3)),
    ]
    failures = []
    for name, function, count in want:
        found = [
            s
            for s in sites
            if s["file"] == script and s["line"] == line_of[name] and s["function"] == function
        ]
        got = sum(c["count"] for c in found[0]["calls"].values()) if found else None
        if got != count:
            failures.append(f"{name}: {script}:{line_of[name]} {function}: {got} calls, want {count}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--bin-dir",
        default=os.environ.get("MLPROF_BIN_DIR", os.path.join(HERE, "..", "..", "target", "release")),
    )
    ap.add_argument("pythons", nargs="+")
    args = ap.parse_args()
    status = 0
    for python in args.pythons:
        version = subprocess.run(
            [python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True
        )
        failures = check(python, os.path.abspath(args.bin_dir))
        verdict = "PASS" if not failures else "FAIL"
        print(f"{verdict} {python} (Python {version.stdout.strip()})")
        for failure in failures:
            print(f"  {failure}")
        status |= bool(failures)
    return status


if __name__ == "__main__":
    sys.exit(main())
