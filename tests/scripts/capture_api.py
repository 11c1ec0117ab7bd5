"""Known numbers of os.write calls around the wheel package's mlprof.start()/stop() and
`with mlprof.capture():`, for `mlprof-collect --capture-range=itt --capture-range-end=repeat`.

    phase:   before  start/stop  between  capture()  after
    writes:     3        5          7        11        13

Prints the values start() and stop() returned, one line each, in order.
"""

import os

import mlprof


def writes(fd: int, n: int) -> None:
    for _ in range(n):
        os.write(fd, b"x")


def main() -> None:
    fd = os.open(os.devnull, os.O_WRONLY)
    writes(fd, 3)
    results = [mlprof.start()]
    writes(fd, 5)
    results.append(mlprof.stop())
    results.append(mlprof.stop())
    writes(fd, 7)
    with mlprof.capture():
        writes(fd, 11)
    writes(fd, 13)
    print(" ".join(str(r) for r in results))


if __name__ == "__main__":
    main()
