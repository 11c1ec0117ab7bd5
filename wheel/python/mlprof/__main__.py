"""``python -m mlprof ARGS`` is ``mlprof ARGS``; ``python -m mlprof collect ARGS`` is
``mlprof-collect ARGS``."""

from mlprof import _main

_main()
