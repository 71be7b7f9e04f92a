"""What a job on this machine needs to know of it beyond `host_facts`: the venv gpujob runs
from (never the job's environment) and the host's own `python3` outside it, which a job of
`image: host` gets a venv of its own from (plan/sandbox.py).
"""

from __future__ import annotations

import os
import shutil
import sys


def own_venv_bin() -> tuple[str, ...]:
    """The bin of the venv gpujob runs from; none when it runs from a Python's own prefix."""
    if sys.prefix == sys.base_prefix:
        return ()
    return (os.path.join(sys.prefix, "bin"),)


def host_python3(hidden: tuple[str, ...]) -> str:
    """`python3` as the user's PATH finds it once gpujob's venv is off it (what a login on a
    host would run); the Python gpujob's venv was made from where PATH has none."""
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and d not in hidden)  # fmt: skip
    found = shutil.which("python3", path=path)
    if found:
        return found
    return getattr(sys, "_base_executable", "") or os.path.join(sys.base_prefix, "bin", "python3")
