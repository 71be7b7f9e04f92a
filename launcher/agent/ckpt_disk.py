"""The checkpoint disk's guard, one look per watcher tick (ckpt_watch). Stdlib only; shipped
beside the agent, which imports it as a sibling module.

Warnings at 60/80/90% go into the job log and status. At 95%, or when the next save
(measured size of the last one) would not fit, the job is paused (SIGSTOP, so no save starts
meanwhile) while the watcher syncs and prunes, then resumed; if that does not free enough,
the job is stopped cleanly with the reason, before a save can fail half-written (seed 002:
ENOSPC at step 9000 while save_total_limit was not honoured). A pause of many minutes on one
node of a multi-node job can trip the other nodes' collective timeouts; it only happens when
the alternative is a disk full mid-save.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ckpt_store

WARN_AT = (60, 80, 90)
ACT_AT = 95.0
HEADROOM = 1.05
"""The next save must fit with 5% to spare, or the agent acts before it starts."""


@dataclass
class DiskGuard:
    """`make_room` syncs what is not in S3 yet and prunes what may go (the watcher's own
    retention, below `keep_last` only what is safe in S3); `synced` is the watcher's set of
    names pushed and verified, read when the guard says what it kept."""

    root: Path
    keep_last: int | None
    sync_to: str | None
    synced: set[str]
    say: Callable[[str], None]
    publish: Callable[[dict[str, Any]], None]
    stop_job: Callable[[str], None]
    pause_job: Callable[[bool], None]
    make_room: Callable[[], None]
    warned: int = 0
    last_size: int = 0
    """The largest complete checkpoint seen: what the next save is taken to need."""
    stopped: str | None = None

    def look(self) -> None:
        total, free, percent = ckpt_store.disk_usage(self.root)
        level = max((w for w in WARN_AT if percent >= w), default=0)
        disk = {"used_pct": round(percent, 1), "free_bytes": free, "total_bytes": total,
                "checkpoint_bytes": self.last_size}  # fmt: skip
        if level > self.warned:
            self.say(f"disk warning: {self.root} is {percent:.1f}% full "
                     f"({gib(free)} free of {gib(total)})")  # fmt: skip
        self.warned = max(self.warned, level) if level else 0
        disk["warning"] = f"disk {percent:.0f}% full" if level else None
        self.publish({"disk": disk})
        if self._fits(free, percent) or self.stopped:
            return
        self.say(f"disk {percent:.1f}% full, {gib(free)} free; the next save needs about "
                 f"{gib(self.last_size)}: job paused while syncing and pruning")  # fmt: skip
        self.pause_job(True)
        try:
            started = time.monotonic()
            self.make_room()
            total, free, percent = ckpt_store.disk_usage(self.root)
            if self._fits(free, percent):
                self.say(f"disk {percent:.1f}% full after pruning; job resumed after "
                         f"{time.monotonic() - started:.1f} s")  # fmt: skip
                return
            self._stop(free, percent)
        finally:
            self.pause_job(False)

    def _stop(self, free: int, percent: float) -> None:
        latest = ckpt_store.latest_complete(self.root)
        kept = f"{latest.name} kept" if latest else "no complete checkpoint yet"
        if latest and self.sync_to:
            kept += " and synced" if latest.name in self.synced else " (its sync failed)"
        why = ("retention is off (keep_last: null)" if self.keep_last is None
               else "nothing more may be deleted")  # fmt: skip
        self.stopped = (
            f"stopped by gpujob: checkpoint disk {percent:.1f}% full "
            f"({gib(free)} free, next save ~{gib(self.last_size)}) and {why}; {kept}"
        )
        self.say(self.stopped)
        self.stop_job(self.stopped)

    def _fits(self, free: int, percent: float) -> bool:
        """Room for the next save, counting a save under way as already placed (the sample
        may fall in the middle of one that fits)."""
        pending = ckpt_store.in_progress_bytes(self.root)
        total, _, _ = ckpt_store.disk_usage(self.root)
        settled = percent - (100.0 * pending / total if total else 0.0)
        return settled < ACT_AT and free + pending >= self.last_size * HEADROOM


def gib(size: int) -> str:
    return f"{size / (1 << 30):.2f} GiB"
