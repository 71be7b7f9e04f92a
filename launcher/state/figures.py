"""A job's last figures (node 0's headline: the loss, its trend, its step), kept on this
machine when the job's end is seen, so `gpujob status` shows them for a job that has ended
without asking its agents or reading S3: one small JSON file per job under the state folder.

Written by whoever records the end with the agents' statuses in hand (`status`, a follow,
`cancel`, the keeper: jobs/state.py record_job_state) and by `gpujob metrics` reading an
ended job's record (from the host or S3). Standard library only: `gpujob status` reads it.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from launcher.paths import state_dir

KEPT = ("name", "value", "trend", "step", "tokens_per_s")
"""What outlives the job: not the GPUs' busy % (an ended job's GPUs are not its own)."""
READ_AT_MOST = 4096


def _path(job_id: str) -> Path:
    return state_dir() / "figures" / f"{job_id}.json"


def save(job_id: str, summary: object) -> None:
    """Keep `summary` (the agent's status `metrics`), where it has a figure; a failure to
    write is not the caller's: the figures are a convenience."""
    if not isinstance(summary, dict) or summary.get("value") is None:
        return
    import tempfile  # only where an end is recorded: status's start-up stays lean

    kept = {k: summary[k] for k in KEPT if summary.get(k) is not None}
    path = _path(job_id)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{job_id}.")
        with os.fdopen(fd, "w") as out:
            json.dump(kept, out)
        os.replace(tmp, path)


def load(job_id: str) -> dict[str, Any] | None:
    """The kept figures, or None (none kept, or a file that is not ours)."""
    try:
        with open(_path(job_id), "rb") as handle:
            data = json.loads(handle.read(READ_AT_MOST))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
