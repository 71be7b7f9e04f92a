"""Bucket file_mounts on a node (plan/bucket_mounts.py, job.json's `checkpoints.buckets`):
each fetched before the job starts, so before its `setup`, and a writable one's changes
uploaded on each new checkpoint and when the job ends.

COPY is fetched once. MOUNT_CACHED is fetched, then uploaded with `rclone copy` (what the
job deleted stays in the bucket: an upload never deletes). MOUNT is `rclone mount` where the
host has FUSE (/dev/fuse and fusermount), else MOUNT_CACHED with one warning in the log; its
VFS cache off, so a file reaches the bucket when it is closed (sequential writes, as
SkyPilot's MOUNT; with a write-back cache, rclone 1.60 dropped what it had not uploaded yet
when unmounted, seen here).
Standard library only, shipped beside the agent for a job with bucket mounts; rclone runs as
checkpoint sync runs it (ckpt_rclone.py): the remote's keys only in rclone's environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckpt_rclone import Rclone, SyncError, rclone_env
from reserve import LOG_FLAGS, say_in_log

COPYING = (
    "--transfers", "8", "--checkers", "16", "--retries", "3", "--low-level-retries", "10",
    "--contimeout", "10s", "--timeout", "60s",
)  # fmt: skip
MOUNT_WAIT_S = 30.0


def fusermount() -> str | None:
    """The unmount tool where FUSE can be used here, else None."""
    if not os.path.exists("/dev/fuse"):
        return None
    return shutil.which("fusermount3") or shutil.which("fusermount")


class BucketMounts:
    """`say` writes one line to the job's log; `log_fd` takes rclone's own output."""

    def __init__(
        self, entries: list[dict[str, Any]], env: dict[str, str], log_fd: int,
        say: Callable[[str], None], cache_dir: Path,
    ) -> None:  # fmt: skip
        # `~/...`: the plan leaves the host's home to the host (plan/file_mounts.py on_host)
        self.entries = [{**e, "path": os.path.expanduser(e["path"])} for e in entries]
        self.cache_dir = cache_dir
        """rclone mount's own files: in the node's folder (a local job writes nowhere else)."""
        self.env = env
        self.log_fd = log_fd
        self.say = say
        self.writable: list[dict[str, Any]] = []
        self.mounted: list[str] = []
        self.lock = threading.Lock()
        self.uploading: threading.Thread | None = None
        self.newest = ""

    def fetch(self) -> str | None:
        """Each bucket in place; the reason of the first failure (the job does not start),
        with rclone's last line: the start's answer is all the user sees of it."""
        rc = Rclone(self.env, log=self.log_fd)
        for entry in self.entries:
            dst, path, written = entry["dst"], entry["path"], entry["written"]
            os.makedirs(path, exist_ok=True)
            mode = entry["mode"]
            if mode == "MOUNT":
                why = self._unmountable(entry)
                if why is None:
                    self.say(f"file_mounts {dst}: {written} mounted (rclone mount, FUSE)")
                    continue
                self.say(f"warning: file_mounts {dst}: {written} is MOUNT, but {why}: copied "
                         "instead, and what the job writes there uploaded on each checkpoint "
                         "and at the end (MOUNT_CACHED)")  # fmt: skip
            try:
                rc.run("copy", entry["source"], path, *COPYING, capture=True,
                       what=f"copy of {written} into file_mounts {dst}")  # fmt: skip
            except SyncError as err:
                return f"file_mounts {dst}: {err}"
            except OSError as err:  # no rclone here: `gpujob up` installs it
                return f"file_mounts {dst}: cannot run rclone on this host: {err.strerror}"
            self.say(f"file_mounts {dst}: fetched {written} ({mode})")
            if mode != "COPY":
                self.writable.append(entry)
        return None

    def _unmountable(self, entry: dict[str, Any]) -> str | None:
        """Mount it; None when mounted, else why not. Only on an empty folder, as SkyPilot
        asks: a mount would hide what the workdir or a file_mount put there."""
        path = entry["path"]
        if not fusermount():
            return "this host has no FUSE (/dev/fuse and fusermount)"
        if os.listdir(path):
            return "its destination is not empty (a mount would hide what is there)"
        try:
            done = subprocess.run(
                ["rclone", "mount", entry["source"], path, "--vfs-cache-mode", "off",
                 "--cache-dir", str(self.cache_dir), "--daemon"],
                env=rclone_env(self.env), stdin=subprocess.DEVNULL, stdout=self.log_fd,
                stderr=self.log_fd, check=False,
            )  # fmt: skip
        except OSError as err:
            return f"rclone could not run: {err.strerror}"
        deadline = time.monotonic() + MOUNT_WAIT_S
        while done.returncode == 0 and time.monotonic() < deadline:
            if os.path.ismount(path):
                self.mounted.append(path)
                return None
            time.sleep(0.2)
        if done.returncode == 0:  # a daemon that may still mount later: not over the copy
            self._unmount(path)
        return f"rclone mount failed (exit {done.returncode}; its output is above)"

    def saved(self, checkpoint: str) -> None:
        """The newest checkpoint (each look): when new, upload in the background, unless an
        upload is under way (a later look, or the end's upload, takes what it missed)."""
        if not self.writable or checkpoint == self.newest:
            return
        if self.uploading is not None and self.uploading.is_alive():
            return
        self.newest = checkpoint
        self.uploading = threading.Thread(
            target=self.upload, args=(f"checkpoint {checkpoint}",), name="gpujob-buckets",
            daemon=True,
        )  # fmt: skip
        self.uploading.start()

    def upload(self, why: str) -> bool:
        """Every writable mount's changes to its bucket; False if one failed (said)."""
        ok = True
        with self.lock:
            rc = Rclone(self.env, log=self.log_fd)
            for entry in self.writable:
                dst, written = entry["dst"], entry["written"]
                try:
                    rc.run("copy", entry["path"], entry["source"], *COPYING,
                           what=f"upload of file_mounts {dst} to {written}")  # fmt: skip
                    self.say(f"file_mounts {dst}: uploaded to {written} ({why})")
                except (SyncError, OSError) as err:
                    self.say(f"file_mounts {dst}: {err}")
                    ok = False
        return ok

    def finish(self) -> bool:
        """After the job ended: the last upload, then each FUSE mount undone."""
        if self.uploading is not None:
            self.uploading.join()
        ok = self.upload("the job ended") if self.writable else True
        for path in self.mounted:
            self._unmount(path)
        return ok

    def _unmount(self, path: str) -> None:
        tool = fusermount()
        if tool:
            subprocess.run([tool, "-u", "-z", path], stdin=subprocess.DEVNULL,
                           stdout=self.log_fd, stderr=self.log_fd, check=False)  # fmt: skip


def from_config(node_dir: Path, config: dict[str, Any], env: dict[str, str]) -> BucketMounts:
    """job.json's `checkpoints.buckets`, saying its lines in the node's log."""
    log_fd = os.open(node_dir / config.get("log", "job.log"), LOG_FLAGS, 0o644)

    def say(text: str) -> None:
        say_in_log(log_fd, [text])

    return BucketMounts(config["checkpoints"]["buckets"], env, log_fd, say,
                        node_dir / "rclone-cache")  # fmt: skip
