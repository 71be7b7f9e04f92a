"""The node logs of a host shipped to S3 beside the checkpoints, so `gpujob logs` works after
the host is gone. Stdlib only; shipped beside the agent."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
        for log in sorted(self.job_dir.glob("node-*/job.log")):
            name = f"{log.parent.name}.log"
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
