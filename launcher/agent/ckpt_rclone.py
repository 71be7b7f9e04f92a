"""rclone as the agent and `gpujob sync-ckpt` run it: tuned for large checkpoint files, its
credentials only in its own environment, a failure as one line.

Stdlib only and shipped beside the agent (ckpt_sync and ckpt_watch import it as a sibling).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TUNED = (
    "--transfers", "4", "--checkers", "16",
    "--s3-chunk-size", "16M", "--s3-upload-concurrency", "8",
    "--multi-thread-streams", "4",
    "--checksum", "--s3-no-head",
    "--retries", "5", "--retries-sleep", "1s", "--low-level-retries", "20",
    "--contimeout", "10s", "--timeout", "60s",
)  # fmt: skip
"""Large files: multipart in 16M parts, 8 in flight per file and 4 files at once (512 MiB of
buffers at most), as rclone's S3 docs suggest; MD5 compare instead of modtime HEADs.
`--s3-no-head` skips rclone's HEAD after each upload (moto rejects it for multipart,
runtime.md 1.11): `rclone check` verifies everything after. Retries cover an endpoint that
drops mid-transfer. Not bigger parts: moto's multipart cost grows with the part size (64M
parts took 2.5x the time of 5M ones here), and on S3 16M already keeps a link busy."""


class SyncError(Exception):
    """One line for the user: which step failed against which path, and rclone's last word."""


def rclone_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Our environment plus the remote's, minus AWS_CA_BUNDLE: rclone 1.60 fails every S3 call
    while it is set, even for http (runtime.md 1.9); a bundle for https goes as RCLONE_CA_CERT,
    which the config renderer sets when the remote has one."""
    env = dict(os.environ)
    env.pop("AWS_CA_BUNDLE", None)
    env["RCLONE_CONFIG"] = "/dev/null"  # the remote is all in variables; no stray file counts
    # `gpujob up` puts rclone in ~/.local/bin on a host that had none (not on a
    # non-login PATH).
    env["PATH"] = os.path.expanduser("~/.local/bin") + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    return env


def read_env_file(path: str | None) -> dict[str, str]:
    """The remote's variables: `-` reads them on stdin (sync-ckpt sends them so: no file on
    the host); a file is deleted once read."""
    if not path:
        return {}
    if path == "-":
        data = json.load(sys.stdin)
    else:
        try:
            data = json.loads(Path(path).read_text())
        finally:
            Path(path).unlink(missing_ok=True)
    return {str(k): str(v) for k, v in data.items()}


def remote_env(
    node_dir: Path, care: dict[str, Any], given: dict[str, str] | None
) -> dict[str, str]:
    """The S3 remotes' variables a node's agent gets (checkpoint sync's and bucket mounts'):
    from the start's stdin (`given`), or SLURM's 0600 file (care's `storage_env_file`),
    deleted once read."""
    env: dict[str, Any] = dict(given or {})
    if care.get("storage_env_file"):
        path = node_dir / care["storage_env_file"]
        try:
            env = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            env = {}
        path.unlink(missing_ok=True)
    return {str(key): str(value) for key, value in env.items()}


class Rclone:
    """Runs rclone, or with `dry_run` only prints the argv it would run."""

    def __init__(self, env: dict[str, str], *, dry_run: bool = False, log: Any = None) -> None:
        self.env = rclone_env(env)
        self.dry_run = dry_run
        self.log = log if log is not None else sys.stderr
        self.planned: list[list[str]] = []

    def run(self, *args: str, what: str, capture: bool = False, changes: bool = True) -> str:
        argv = ["rclone", *args]
        if self.dry_run and changes:
            self.planned.append(argv)
            return ""
        progress = ["--stats", "5s", "--stats-one-line", "--stats-log-level", "NOTICE"]
        done = subprocess.run(
            argv + ([] if capture else progress),
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture else self.log,
            stderr=subprocess.PIPE if capture else self.log,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = (done.stderr or "").strip().splitlines()[-1:] if capture else []
            detail = f": {tail[0]}" if tail else " (its output is above)"
            raise SyncError(f"rclone {what} failed with exit {done.returncode}{detail}")
        return done.stdout or ""


def rcat(env: dict[str, str], path: Path, size: int, dest: str) -> None:
    """Upload the first `size` bytes of `path` to the object `dest` (`rclone rcat`): a file
    that grows meanwhile, as a running job's log does, is copied as it was, not refused."""
    proc = subprocess.Popen(
        ["rclone", "rcat", dest], env=rclone_env(env), stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stderr is not None
    try:
        with open(path, "rb") as source:
            left = size
            while left > 0 and (chunk := source.read(min(1 << 20, left))):
                proc.stdin.write(chunk)
                left -= len(chunk)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # rclone gave up: its exit code and last line say why
    said = proc.stderr.read().decode(errors="replace").strip().splitlines()
    if proc.wait() != 0:
        raise SyncError(f"rclone rcat to {dest} failed with exit {proc.returncode}"
                        + (f": {said[-1]}" if said else ""))  # fmt: skip
