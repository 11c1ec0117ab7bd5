"""Commands on stdin, one a line, each answered "ok" on stdout: `resume` / `pause` (ittapi),
`write N` (N os.write calls to the file argv[1]), `pace N` (N writes, 50 ms apart), `quit`.
For attach-mode capture ranges: a process that outlives its collector while paused."""

import os
import sys
import time

import ittapi


def main() -> None:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "resume":
            ittapi.resume()
        elif command == "pause":
            ittapi.pause()
        elif command in ("write", "pace"):
            for _ in range(int(arg)):
                os.write(fd, b"x")
                if command == "pace":
                    time.sleep(0.05)
        elif command == "quit":
            break
        os.write(1, b"ok\n")  # one write call per answer


if __name__ == "__main__":
    main()
