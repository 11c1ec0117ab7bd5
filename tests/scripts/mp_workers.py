"""mp_workers.py METHOD DIR NWORKERS NWRITES

Starts NWORKERS multiprocessing.Process workers with the given start method
(fork, spawn or forkserver).  Worker i opens DIR/w<i>.dat with os.open and
does exactly NWRITES + i os.write calls of one 16-byte record holding its
pid ("%015d\\n"), then os.close.  The test reads the pid back from the file.
The main process joins all workers and exits 1 if any failed.  Prints nothing.
"""
import multiprocessing as mp
import os
import sys


def work(path, count):
    record = b"%015d\n" % os.getpid()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(count):
        os.write(fd, record)
    os.close(fd)


def main():
    method, directory = sys.argv[1], sys.argv[2]
    nworkers, nwrites = int(sys.argv[3]), int(sys.argv[4])
    ctx = mp.get_context(method)
    procs = [
        ctx.Process(target=work, args=(os.path.join(directory, "w%d.dat" % i), nwrites + i))
        for i in range(nworkers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:
        print("worker exit codes: %r" % failed, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
