"""What a job on this machine needs to know of it beyond `host_facts`: the venv gpujob runs
from (whose bin leaves the job's PATH) and the host's `python3`, which a job of `image: host`
gets a venv of its own from (plan/sandbox.py).
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


def host_python3() -> str:
    """`python3` as the user's PATH finds it (what they would run themselves; the venv gpujob
    runs from when they put it first there): the job's venv reads its packages, never writes
    them. The Python gpujob runs on where PATH has none."""
    return shutil.which("python3") or sys.executable
