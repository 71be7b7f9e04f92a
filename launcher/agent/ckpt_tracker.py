"""verl's `latest_checkpointed_iteration.txt` (the tracker verl resumes from) carried with
its checkpoints: pushed into S3 after the checkpoint it names has its marker there, so a
reader never meets a tracker naming an absent checkpoint; written by a pull naming the
newest checkpoint pulled, so verl's own resume finds it.

Stdlib only and shipped beside the agent (ckpt_sync imports it as a sibling module).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import ckpt_store
from ckpt_rclone import Rclone

_pushed: dict[str, str] = {}
"""remote -> the tracker text this process last put there: the agent pushes on every pass
of its checkpoint care, and an unchanged tracker is not sent again."""


def push_tracker(rc: Rclone, root: Path, remote: str, landed: set[str]) -> None:
    """The tracker into `remote` once a checkpoint it names has landed (`landed`: names
    whose marker is there). The text read once is what is sent, whatever verl writes
    meanwhile."""
    try:
        text = (root / ckpt_store.VERL_TRACKER).read_text()
        step = int(text.strip())
    except (OSError, ValueError):
        return
    if _pushed.get(remote) == text:
        return
    if not any(ckpt_store.step_of(name) == step for name in landed):
        return
    with tempfile.TemporaryDirectory(prefix="gpujob-tracker-") as scratch:
        copy = Path(scratch) / ckpt_store.VERL_TRACKER
        copy.write_text(text)
        dest = f"{remote}/{ckpt_store.VERL_TRACKER}"
        rc.run("copyto", str(copy), dest, what=f"copy of verl's tracker (step {step}) to {dest}")
    if not rc.dry_run:
        _pushed[remote] = text


def pull_tracker(rc: Rclone, remote: str, dest: Path, names: list[str]) -> None:
    """Where the bucket holds verl's tracker, the pulled folder gets one naming the newest
    checkpoint pulled (each verified by the caller), so verl's own resume finds it there."""
    out = rc.run("lsjson", remote, "--files-only", "--no-modtime", "--no-mimetype",
                 "--include", f"/{ckpt_store.VERL_TRACKER}", what=f"listing {remote}",
                 capture=True, changes=False)  # fmt: skip
    if not json.loads(out or "[]"):
        return
    step = max(ckpt_store.step_of(name) or 0 for name in names)
    tmp = dest / f".{ckpt_store.VERL_TRACKER}.tmp"
    tmp.write_text(str(step))
    tmp.replace(dest / ckpt_store.VERL_TRACKER)
