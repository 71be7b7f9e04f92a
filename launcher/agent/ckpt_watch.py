"""The agent's checkpoint care on the host: markers, hooks, sync, retention, disk. Stdlib only.

One thread beside the supervisor's wait loop, looking every `interval_s`:
1. adopt format-complete checkpoints the program left without a marker (ckpt_store);
2. start `on_checkpoint` for the next complete checkpoint, one hook at a time;
3. push new complete checkpoints to `sync_to` (verified: see ckpt_sync), in a worker thread
   so that a slow upload never delays the disk samples;
4. delete complete checkpoints beyond `keep_last`, oldest step first, only once synced when
   a sync target is set, never the newest complete one, never one a hook still needs;
5. look at the disk (ckpt_disk): warnings, and before a save could not fit, the job paused
   while syncing and pruning, or stopped cleanly with the reason.
Works whatever the training framework does with its own limit.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ckpt_captures
import ckpt_disk
import ckpt_logs
import ckpt_store
import ckpt_sync


@dataclass
class WatchConfig:
    root: Path
    keep_last: int | None
    sync_to: str | None = None
    on_checkpoint: str | None = None
    workdir: Path | None = None
    interval_s: float = 1.0
    logs_to: str | None = None
    job_dir: Path | None = None
    log_every_s: float = 60.0
    complete_when: str | None = None
    run: dict[str, str] | None = None
    """Whose checkpoints `sync_to` holds (its run folder): name, job_id, spec_hash."""
    outputs: Path | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any], node_dir: Path) -> WatchConfig:
        return cls(
            root=Path(data["dir"]),
            keep_last=data.get("keep_last"),
            sync_to=data.get("sync_to"),
            on_checkpoint=data.get("on_checkpoint"),
            workdir=Path(data["workdir"]) if data.get("workdir") else node_dir,
            interval_s=float(data.get("interval_s", 1.0)),
            logs_to=data.get("logs_to"),
            job_dir=Path(data["job_dir"]) if data.get("job_dir") else None,
            log_every_s=float(data.get("log_every_s", 60.0)),
            complete_when=data.get("complete_when"),
            run=data.get("run"),
            outputs=Path(data["outputs"]) if data.get("outputs") else None,
        )


@dataclass
class Watcher:
    """`say` writes a line to the job log; `publish` merges a dict into status.json; `stop_job`
    ends the job with a reason. Kept as callables so tests can drive one tick at a time."""

    config: WatchConfig
    log_fd: int
    say: Callable[[str], None]
    publish: Callable[[dict[str, Any]], None]
    stop_job: Callable[[str], None]
    pause_job: Callable[[bool], None] = lambda _: None
    env: dict[str, str] = field(default_factory=dict)
    hook_env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    synced: set[str] = field(default_factory=set)
    unsettled: set[str] = field(default_factory=set)
    """Names handed to a push that has not settled them yet (landed, or dropped with its
    leftovers removed): one the program deletes before that happens may have left a partial
    copy in S3 that no later push would touch, so a later look removes it (`discard`)."""
    hooked: set[str] = field(default_factory=set)
    adopter: ckpt_store.Adopter = field(default_factory=ckpt_store.Adopter)
    hook: tuple[str, subprocess.Popen[bytes]] | None = None
    sync_failures: int = 0
    syncing: threading.Thread | None = None
    logs: ckpt_logs.LogShipper = field(init=False)
    kept: ckpt_logs.HookOutputs = field(init=False)
    captures: ckpt_captures.CaptureShipper = field(init=False)
    disk: ckpt_disk.DiskGuard = field(init=False)
    told: set[str] = field(default_factory=set)
    """Folders the log already named as checkpoints of no rule (said once each)."""
    saved: Callable[[str], None] = lambda _: None
    """Told the newest complete checkpoint at each look (bucket file_mounts' uploads)."""

    def __post_init__(self) -> None:
        config = self.config
        self.logs = ckpt_logs.LogShipper(config.logs_to, config.job_dir, config.log_every_s,
                                         self.env, self.say)  # fmt: skip
        self.kept = ckpt_logs.HookOutputs(config.root, config.sync_to, config.outputs, self.say)
        self.adopter.rule = self.config.complete_when
        self.captures = ckpt_captures.CaptureShipper(config.root, config.sync_to, self.env,
                                                     self.say)  # fmt: skip
        self.disk = ckpt_disk.DiskGuard(
            config.root, config.keep_last, config.sync_to, self.synced, say=self.say,
            publish=self.publish, stop_job=self.stop_job, pause_job=self.pause_job,
            make_room=self._make_room,
        )  # fmt: skip

    def tick(self) -> None:
        self.logs.ship()
        if not self.config.root.is_dir():
            return
        self.captures.ship()
        for ckpt in self.adopter.adopt(self.config.root):
            self.say(f"checkpoint {ckpt.name}: complete (marker written by the agent)")
        self._unrecognised()
        done = ckpt_store.complete(self.config.root)
        if done:
            self.disk.last_size = max(self.disk.last_size, ckpt_store.tree_bytes(done[-1].path))
            self.saved(done[-1].name)
        self._hooks(done)
        self._sync(done)
        self._prune(done)
        self.disk.look()

    def finish(self) -> None:
        """After the job ended: the last checkpoints synced, hooks run, retention applied."""
        self.tick()
        while self.hook is not None or self._next_hook(ckpt_store.complete(self.config.root)):
            if self.hook is not None:
                self.hook[1].wait()
            self._hooks(ckpt_store.complete(self.config.root))
        self._sync(ckpt_store.complete(self.config.root), wait=True)
        self.tick()
        if self.syncing is not None:
            self.syncing.join()
        if self.synced and self.config.sync_to:  # a push's own names were spared: not now
            self._prune_remote(ckpt_sync.Rclone(self.env, log=self.log_fd), set())
        self.logs.ship(final=True)

    def _unrecognised(self) -> None:
        """Say, once each, what sits in the checkpoint folder that no rule makes a complete
        checkpoint: it is never synced, pruned or given to a hook."""
        stuck = [c.name for c in ckpt_store.stuck_incomplete(ckpt_store.scan(self.config.root))]
        strays = ckpt_store.unrecognised(self.config.root)
        new = [n for n in [*strays, *stuck] if n not in self.told]
        if not new:
            return
        self.told.update(new)
        rules = (
            f"no .gpujob-complete, and not complete by checkpoints.complete_when "
            f"`{self.config.complete_when}`, the only other rule when it is given"
            if self.config.complete_when
            else "no .gpujob-complete, trainer_state.json, DCP .metadata, verl tracker or "
            "checkpoints.complete_when file"
        )
        for name in new:
            why = (
                "is named as no checkpoint (checkpoint-N, step_N, global_step_N)"
                if name in strays
                else f"is complete by no rule ({rules}) while a later save exists"
            )
            self.say(f"checkpoints: {name}/ {why}: not synced, pruned or hooked; see "
                     "checkpoints.complete_when in the README")  # fmt: skip
        self.publish({"checkpoints_unrecognised": sorted(self.told)})

    def _next_hook(self, done: list[ckpt_store.Checkpoint]) -> ckpt_store.Checkpoint | None:
        if not self.config.on_checkpoint:
            return None
        return next((c for c in done if c.name not in self.hooked), None)

    def _hooks(self, done: list[ckpt_store.Checkpoint]) -> None:
        if self.hook is not None:
            name, proc = self.hook
            if proc.poll() is None:
                return
            self.say(f"on_checkpoint for {name} exited {proc.returncode}")
            self.hook = None
            self.kept.hook_ended(name)
        nxt = self._next_hook(done)
        if nxt is None or not self.config.on_checkpoint:
            return
        self.hooked.add(nxt.name)
        self.say(f"on_checkpoint for {nxt.name}: {self.config.on_checkpoint}")
        env = dict(
            self.hook_env, GPUJOB_CHECKPOINT=str(nxt.path), GPUJOB_CHECKPOINT_STEP=str(nxt.step)
        )
        proc = subprocess.Popen(
            ["bash", "-c", self.config.on_checkpoint],
            cwd=self.config.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.hook = (nxt.name, proc)

    def _sync(self, done: list[ckpt_store.Checkpoint], wait: bool = False) -> None:
        """Start a push of what is not synced yet; with `wait`, finish any push under way and
        do this one in the calling thread."""
        if not self.config.sync_to:
            return
        if self.syncing is not None and self.syncing.is_alive():
            if not wait:
                return
            self.syncing.join()
        todo = [c.name for c in done if c.name not in self.synced and c.path.is_dir()]
        gone = sorted(
            self.unsettled - {c.name for c in done}, key=lambda n: ckpt_store.step_of(n) or 0
        )
        if not todo and not gone and not self.kept.fresh:
            return
        if wait:
            self._push(todo, gone)
            return
        self.syncing = threading.Thread(target=self._push, args=(todo, gone), name="gpujob-sync")
        self.syncing.start()

    def _push(self, todo: list[str], gone: list[str] | None = None) -> None:
        """Push `todo`, after removing from S3 what failed pushes left of `gone` (names tried
        before whose host copy has vanished since)."""
        assert self.config.sync_to is not None
        rc = ckpt_sync.Rclone(self.env, log=self.log_fd)
        try:
            self.kept.ship(rc, self.synced)  # the hooks' files of checkpoints pushed before
            if not todo and not gone:
                return
            for name in ckpt_sync.discard(rc, self.config.sync_to, gone or []):
                self.say(f"{name}: removed its partial copy from {self.config.sync_to} (deleted "
                         "on this host before its push finished)")  # fmt: skip
            self.unsettled.difference_update(gone or [])
            self.unsettled.update(todo)
            moved = ckpt_sync.push(self.config.root, self.config.sync_to, rc, names=todo)
        except (ckpt_sync.SyncError, OSError) as err:
            self.sync_failures += 1
            self.say(
                f"sync of {', '.join(todo)} to {self.config.sync_to} failed: {err}; "
                "retrying at the next look, nothing is deleted until it succeeds"
            )
            self.publish({"sync": {"failures": self.sync_failures, "error": str(err)}})
            return
        landed = [m.name for m in moved if m.verified]
        dropped = [m.name for m in moved if m.dropped]
        self.synced.update(landed)
        self.unsettled.difference_update(landed + dropped)  # the rest vanished before it was read
        if dropped:
            self.say(
                f"{', '.join(dropped)}: deleted on this host during the push (the program's own "
                f"retention?); its partial copy was removed from {self.config.sync_to}"
            )
        if landed:
            self.say(f"synced {', '.join(landed)} to {self.config.sync_to} (verified)")
            self._prune_remote(rc, set(landed))
        self.kept.ship(rc, self.synced)
        synced = sorted(self.synced, key=lambda n: ckpt_store.step_of(n) or 0)
        self.publish({"sync": {"failures": self.sync_failures, "synced": synced}})

    def _manifest(self, rc: ckpt_sync.Rclone) -> None:
        """The run's manifest beside its checkpoints, after each push and its retention."""
        if self.config.run and self.config.sync_to:
            try:
                ckpt_logs.write_manifest(rc, self.config.sync_to, self.config.run)
            except (ckpt_sync.SyncError, OSError) as err:
                self.say(f"run manifest in {self.config.sync_to} not written: {err}")

    def _prune_remote(self, rc: ckpt_sync.Rclone, fresh: set[str]) -> None:
        """`keep_last` holds in the bucket as on the host, over what this watcher pushed and
        verified (never the newest, never one of `fresh`, the push just made); then the
        run's manifest says what is there, when anything changed."""
        gone: list[str] = []
        if self.config.keep_last is not None and self.config.sync_to:
            try:
                gone = ckpt_sync.prune_remote(
                    rc, self.config.sync_to, self.config.keep_last, set(self.synced), fresh
                )
            except ckpt_sync.SyncError as err:
                self.say(f"retention in {self.config.sync_to} failed: {err}; tried again next sync")
        if gone:
            self.say(f"retention in {self.config.sync_to}: deleted {', '.join(gone)} "
                     f"(keep_last {self.config.keep_last})")  # fmt: skip
        if fresh or gone:
            self._manifest(rc)

    def _protected(self) -> set[str]:
        pending = {c.name for c in ckpt_store.complete(self.config.root)} - self.hooked
        running = {self.hook[0]} if self.hook else set()
        return (pending if self.config.on_checkpoint else set()) | running | self.kept.ended

    def _prune(self, done: list[ckpt_store.Checkpoint], keep: int | None = None) -> int:
        keep_last = self.config.keep_last if keep is None else keep
        safe = self.synced if self.config.sync_to else {c.name for c in done}
        freed = 0
        for ckpt in ckpt_store.to_delete(done, keep_last, safe, self._protected()):
            size = ckpt_store.tree_bytes(ckpt.path)
            ckpt_store.remove(ckpt.path)
            freed += size
            self.say(
                f"retention: deleted {ckpt.name} ({ckpt_disk.gib(size)}; keep_last "
                f"{keep_last}{', synced first' if self.config.sync_to else ''})"
            )
        if freed or done:
            left = ckpt_store.complete(self.config.root)
            latest = left[-1].name if left else None
            self.publish({"checkpoints": {"complete": [c.name for c in left], "latest": latest}})
        return freed

    def _make_room(self) -> None:
        """The disk guard's ask: everything pushed, then below `keep_last` only what is
        safe in S3 (one kept), or plain retention without a sync target."""
        done = ckpt_store.complete(self.config.root)
        self._sync(done, wait=True)
        emergency = 1 if self.config.keep_last is not None and self.config.sync_to else None
        self._prune(done, keep=emergency)


def run_in_thread(watcher: Watcher, done: threading.Event) -> threading.Thread:
    """Look every interval until `done`, then the final pass."""

    def loop() -> None:
        while not done.wait(watcher.config.interval_s):
            try:
                watcher.tick()
            except Exception as err:
                watcher.say(f"checkpoint watcher: {type(err).__name__}: {err}")
        try:
            watcher.finish()
        except Exception as err:
            watcher.say(f"checkpoint watcher (final pass): {type(err).__name__}: {err}")

    thread = threading.Thread(target=loop, name="gpujob-ckpt", daemon=False)
    thread.start()
    return thread
