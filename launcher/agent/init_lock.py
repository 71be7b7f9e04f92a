#!/usr/bin/env python3
"""Serialized start-up for the ranks of one host (seed 001). Standard library only.

torchrun runs this file in place of the program when `run.serialize_init: true`: each rank
takes an exclusive `flock` on `GPUJOB_INIT_LOCK`, imports `GPUJOB_INIT_IMPORTS` (the heavy
modules, whose import may JIT-compile ops), releases the lock, and then runs the program in
the same interpreter, where those modules are already loaded. Eight ranks then never build
or import at the same moment, which is what ran the seed's host out of memory.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import runpy
import sys
import time


def _say(rank: str, text: str) -> None:
    print(f"[rank {rank}] LOCK: {text}", flush=True)


def serialized_imports() -> None:
    rank = os.environ.get("RANK", "?")
    path = os.environ["GPUJOB_INIT_LOCK"]
    modules = [m for m in os.environ.get("GPUJOB_INIT_IMPORTS", "").split(",") if m]
    with open(path, "a") as lock:
        _say(rank, "waiting for exclusive access")
        asked = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        _say(
            rank, f"acquired after {time.monotonic() - asked:.1f} s; importing {', '.join(modules)}"
        )
        began = time.monotonic()
        for module in modules:
            importlib.import_module(module)
        fcntl.flock(lock, fcntl.LOCK_UN)
        _say(rank, f"released after {time.monotonic() - began:.1f} s of imports")


def main() -> None:
    args = sys.argv[1:]
    module = args[:1] == ["-m"]
    # The program's own modules must be importable under the lock, as they will be after it.
    sys.path[0] = os.getcwd() if module else os.path.dirname(os.path.abspath(args[0]))
    serialized_imports()
    if module:
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
