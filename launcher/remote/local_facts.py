"""What a job on this machine needs to know of it beyond `host_facts`: the venv gpujob runs
from (whose bin leaves the job's PATH), the host's `python3`, which a job of `image: host`
gets a venv of its own from (plan/sandbox.py), and whether Docker answers for a container.
"""

from __future__ import annotations

import os
import shutil
import sys

from launcher.errors import UsageError
from launcher.plan.model import HostFacts


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


def docker_facts(ref: str, where: str) -> HostFacts:
    """This machine's facts for a job in a container (its images, GPUs, memlock), or one line
    naming `image:` (`where`) when Docker does not answer here."""
    from launcher.remote.facts import host_facts
    from launcher.remote.local import LocalConnection

    facts = host_facts(LocalConnection(), require_python=False)
    if not facts.docker:
        raise UsageError(
            f"{where}: image: {ref} is a container image and Docker does not answer on this "
            "machine (a job never falls back to this machine's Python)",
            "start Docker, run it on a host that has it (`--on HOST`, `--up GPU`), or use "
            "`image: host`",
        )
    return facts
