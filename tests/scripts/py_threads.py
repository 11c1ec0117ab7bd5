"""py_threads.py DIR NTHREADS N

Starts NTHREADS threading.Thread workers that run together (a Barrier
releases them at once).  Thread i opens DIR/t<i>.dat with os.open, does
exactly N + i os.write calls of 32 bytes, then N + i os.pread calls of 16
bytes at offset 0, then os.close.  Prints nothing.
"""
import os
import sys
import threading


def main():
    directory, nthreads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    barrier = threading.Barrier(nthreads)
    errors = []

    def work(i):
        try:
            barrier.wait()
            count = n + i
            fd = os.open(os.path.join(directory, "t%d.dat" % i), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            for _ in range(count):
                os.write(fd, b"x" * 32)
            for _ in range(count):
                if len(os.pread(fd, 16, 0)) != 16:
                    raise RuntimeError("short pread")
            os.close(fd)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("thread errors: %r" % errors, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
