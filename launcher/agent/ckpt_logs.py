"""What the agent ships beside the checkpoints of its run: the node logs and metrics, so
`gpujob logs` and `gpujob metrics` work after the host is gone, and the run's manifest, so
a reader knows whose checkpoints these are. Stdlib only; shipped beside the agent."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import ckpt_store
import ckpt_sync


@dataclass
class LogShipper:
    """Each node log under `job_dir` to `logs_to`, as written so far, every `every_s` and
    once more at the end (the whole object again each time: a log is small beside a
    checkpoint); a failure is said once, and again at the end."""

    logs_to: str | None
    job_dir: Path | None
    every_s: float
    env: dict[str, str]
    say: Callable[[str], None]
    shipped: dict[str, int] = field(default_factory=dict)
    shipped_at: float = 0.0
    failures: int = 0

    def ship(self, final: bool = False) -> None:
        if not self.logs_to or self.job_dir is None:
            return
        if not final and time.monotonic() - self.shipped_at < self.every_s:
            return
        self.shipped_at = time.monotonic()
        logs = [*self.job_dir.glob("node-*/job.log"), *self.job_dir.glob("node-*/metrics.jsonl")]
        for log in sorted(logs):  # the metrics record (metrics.py) travels with its log
            name = f"{log.parent.name}.{'log' if log.name == 'job.log' else log.name}"
            size = log.stat().st_size
            if self.shipped.get(name) == size:
                continue
            try:
                ckpt_sync.rcat(self.env, log, size, f"{self.logs_to}/{name}")
            except (ckpt_sync.SyncError, OSError) as err:
                self.failures += 1
                if self.failures == 1 or final:
                    self.say(f"shipping {name} to {self.logs_to} failed: {err}")
                continue
            self.shipped[name] = size


def write_manifest(rc: ckpt_sync.Rclone, run_path: str, run: dict[str, str]) -> dict[str, object]:
    """`<run>/gpujob-run.json` after a push: the run's name, the job and spec hash that pushed
    last, every job that pushed to it, and the steps complete there now. One object written
    whole (`rclone copyto` of a finished local file: S3 shows the old or the new one)."""
    where = f"{run_path}/{ckpt_store.RUN_MANIFEST}"
    try:
        said = rc.run("cat", where, what=f"reading {where}", capture=True, changes=False)
        old = json.loads(said or "{}")
    except (ckpt_sync.SyncError, ValueError):
        old = {}  # none yet (rclone cat of a missing object fails)
    jobs = [j for j in old.get("jobs", []) if j != run["job_id"]] if isinstance(old, dict) else []
    steps = sorted(ckpt_store.step_of(n) or 0 for n in ckpt_sync.remote_markers(rc, run_path))
    body = {
        "run": run["name"],
        "job_id": run["job_id"],
        "spec_hash": run["spec_hash"],
        "jobs": [*jobs, run["job_id"]],
        "steps": steps,
        "updated_at": int(time.time()),
    }
    fd, tmp = tempfile.mkstemp(prefix=".gpujob-run.", suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(body, out, indent=1, sort_keys=True)
        rc.run("copyto", tmp, where, "--s3-no-head", what=f"writing {where}", capture=True)
    finally:
        os.unlink(tmp)
    return body


@dataclass
class HookOutputs:
    """What `on_checkpoint` hooks write after their checkpoint's push (seed 000's eval
    `metrics.csv` beside the weights) and into the declared `outputs` folder, copied to the
    run's folder once each hook has ended: its checkpoint is copied again (rclone sends only
    what changed, the hook's files; the marker in S3 stays, and promises only the files the
    save wrote) once the push that verified it has landed, and the outputs folder goes to
    `<run>/outputs/`. A checkpoint waiting here is not pruned from the host meanwhile."""

    root: Path
    sync_to: str | None
    outputs: Path | None
    say: Callable[[str], None]
    ended: set[str] = field(default_factory=set)
    """Checkpoints whose hook has ended and whose folder is not copied again yet."""
    fresh: bool = False
    """A hook ended since the outputs folder was last copied."""

    def hook_ended(self, name: str) -> None:
        if self.sync_to:
            self.ended.add(name)
            self.fresh = True

    def ship(self, rc: ckpt_sync.Rclone, synced: set[str]) -> None:
        """Copy what the ended hooks wrote, for the checkpoints already in S3 (the others
        wait for their push; one deleted from the host meanwhile is dropped)."""
        assert self.sync_to is not None
        self.ended = {name for name in self.ended if (self.root / name).is_dir()}
        for name in sorted(self.ended & synced, key=lambda n: ckpt_store.step_of(n) or 0):
            dest = f"{self.sync_to}/{name}"
            rc.run("copy", str(self.root / name), dest, "--exclude", f"/{ckpt_store.MARKER}",
                   what=f"copy of {name}'s hook outputs to {dest}")  # fmt: skip
            self.ended.discard(name)
            self.say(f"{name}: what its on_checkpoint hook wrote is in {dest}")
        if self.fresh and self.outputs is not None and self.outputs.is_dir():
            dest = f"{self.sync_to}/outputs"
            rc.run("copy", str(self.outputs), dest, what=f"copy of {self.outputs} to {dest}")
            self.say(f"outputs: {self.outputs} copied to {dest}")
        self.fresh = False
