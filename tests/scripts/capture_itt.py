"""Known numbers of os.write calls before, inside and after two ITT ranges: resume/pause,
then resume/detach (ittapi), for `mlprof-collect --capture-range=itt`.

    phase:   before  range1  between  range2  after
    writes:     3       5       7       11      13
"""

import os

import ittapi


def writes(fd: int, n: int) -> None:
    for _ in range(n):
        os.write(fd, b"x")


def main() -> None:
    fd = os.open(os.devnull, os.O_WRONLY)
    writes(fd, 3)
    ittapi.resume()
    writes(fd, 5)
    ittapi.pause()
    writes(fd, 7)
    ittapi.resume()
    writes(fd, 11)
    ittapi.detach()
    writes(fd, 13)


if __name__ == "__main__":
    main()
