"""Calls made at known lines, for `mlprof-collect --sites` (tests/tests/sites.rs): each line
marked `# site: NAME` makes a known number of calls, from a function, a method, a generator,
a comprehension, a thread, and worker processes started with fork and with spawn; the test
finds the lines by their marks.

    sites.py DIR N
"""

import errno
import multiprocessing
import os
import sys
import threading


def stat_loop(path, n):
    for _ in range(n):
        os.stat(path)  # site: function


class Reader:
    def read_bytes(self, fd, n):
        for _ in range(n):
            os.read(fd, 1)  # site: method


def sizes(paths):
    for path in paths:
        yield os.stat(path).st_size  # site: generator


def in_thread(path, n):
    for _ in range(n):
        os.stat(path)  # site: thread


def missing(path, n):
    # The first failed call at this line names the site (system calls of our own), the others
    # find it named: the errno each call left must reach Python unchanged either way.
    for _ in range(n):
        try:
            os.stat(path)  # site: missing
        except FileNotFoundError as e:
            assert e.errno == errno.ENOENT, e


def worker(path, n):
    for _ in range(n):
        os.stat(path)  # site: worker


def main():
    folder, n = sys.argv[1], int(sys.argv[2])
    files = []
    for i in range(n):
        path = os.path.join(folder, f"f{i}.txt")
        with open(path, "w") as f:
            f.write("x" * 10)
        files.append(path)
    stat_loop(files[0], n + 1)
    missing(os.path.join(folder, "missing"), n + 5)
    fd = os.open(files[1], os.O_RDONLY)
    Reader().read_bytes(fd, n + 2)
    os.close(fd)
    stats = [os.stat(path) for path in files]  # site: comprehension
    total = sum(sizes(files))
    thread = threading.Thread(target=in_thread, args=(files[2], n + 4))
    thread.start()
    thread.join()
    for method in ("fork", "spawn"):
        process = multiprocessing.get_context(method).Process(target=worker, args=(files[3], n + 3))
        process.start()
        process.join()
        assert process.exitcode == 0, (method, process.exitcode)
    # Comprehensions are code objects of their own before 3.12 (PEP 709 inlined them); code
    # objects have qualified names from 3.11 (before, the bare name).
    qualified = sys.version_info >= (3, 11)
    comprehension = "main" if sys.version_info >= (3, 12) else "main.<locals>.<listcomp>"
    comprehension = comprehension if qualified else "<listcomp>"
    method = "Reader.read_bytes" if qualified else "read_bytes"
    print(f"comprehension_function={comprehension} method_function={method} files={len(stats)} bytes={total}")


if __name__ == "__main__":
    main()
