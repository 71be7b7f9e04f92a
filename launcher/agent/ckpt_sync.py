"""Move complete checkpoints between a folder and S3 with rclone, and prove they arrived.

Stdlib only and shipped beside the agent: the agent pushes from the host as checkpoints land,
and `gpujob sync-ckpt` runs this same file on the job's host (or here, for local jobs), so
one implementation decides what moves and how it is checked.

Order of a push, per batch of checkpoints: copy the data (markers excluded), `rclone check`
it (sizes and MD5s), then upload the markers. A marker in S3 therefore means a verified copy;
a push cut off at any point leaves a prefix without one, which nobody counts as a checkpoint.
A pull copies data, checks it against S3 and against the marker's file list, then the marker.

Credentials never reach argv: they come as RCLONE_CONFIG_* variables from the caller's
environment or from an env file (JSON, mode 0600) that is deleted once read.

    python3 ckpt_sync.py push ROOT REMOTE:bucket/prefix [--latest|--step N] [--env-file F]
    python3 ckpt_sync.py pull REMOTE:bucket/prefix DEST [--latest|--step N] [--env-file F]
    (both take --dry-run and --json)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ckpt_store

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


@dataclass
class Moved:
    name: str
    step: int
    files: int
    bytes: int
    skipped: bool = False
    verified: bool = False


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
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    finally:
        Path(path).unlink(missing_ok=True)
    return {str(k): str(v) for k, v in data.items()}


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


def remote_markers(rc: Rclone, remote: str) -> dict[str, str]:
    """name -> MD5 of its marker object, for every complete checkpoint under `remote`."""
    out = rc.run(
        "lsjson",
        remote,
        "-R",
        "--files-only",
        "--hash",
        "--no-modtime",
        "--no-mimetype",
        "--include",
        f"/*/{ckpt_store.MARKER}",
        what=f"listing {remote}",
        capture=True,
        changes=False,
    )
    found = {}
    for item in json.loads(out or "[]"):
        name = item["Path"].split("/")[0]
        if ckpt_store.step_of(name) is not None:
            found[name] = (item.get("Hashes") or {}).get("md5", "")
    return found


def choose(names: list[str], latest: bool, step: int | None, where: str) -> list[str]:
    ordered = sorted(names, key=lambda n: ckpt_store.step_of(n) or 0)
    if step is not None:
        picked = [n for n in ordered if ckpt_store.step_of(n) == step]
        if not picked:
            have = ", ".join(ordered) or "none"
            raise SyncError(f"no complete checkpoint of step {step} in {where} (complete: {have})")
        return picked
    if not ordered:
        raise SyncError(
            f"no complete checkpoint in {where} (a checkpoint counts once its "
            f"{ckpt_store.MARKER} marker exists)"
        )
    return ordered[-1:] if latest else ordered


def push(
    root: Path,
    remote: str,
    rc: Rclone,
    *,
    latest: bool = False,
    step: int | None = None,
    names: list[str] | None = None,
) -> list[Moved]:
    local = {c.name: c for c in ckpt_store.complete(root)}
    if names is not None:
        wanted = [n for n in names if n in local]  # the program may have deleted some since
    else:
        wanted = choose(list(local), latest, step, str(root))
    there = remote_markers(rc, remote)
    moved, todo = [], []
    for name in wanted:
        ckpt = local[name]
        files = ckpt_store.files_of(ckpt.path)
        item = Moved(name, ckpt.step, len(files), sum(files.values()))
        digest = hashlib.md5((ckpt.path / ckpt_store.MARKER).read_bytes()).hexdigest()
        if there.get(name) == digest:
            item.skipped = item.verified = True
        else:
            todo.append(name)
        moved.append(item)
    if todo:
        _transfer(rc, str(root), remote, todo)
        for item in moved:
            item.verified = True
    return moved


def pull(
    remote: str, dest: Path, rc: Rclone, *, latest: bool = False, step: int | None = None
) -> list[Moved]:
    names = choose(list(remote_markers(rc, remote)), latest, step, remote)
    _transfer(rc, remote, str(dest), names)
    moved = []
    for name in names:
        if rc.dry_run:
            moved.append(Moved(name, ckpt_store.step_of(name) or 0, 0, 0))
            continue
        expected = ckpt_store.read_marker(dest / name).get("files", {})
        have = ckpt_store.files_of(dest / name)
        if expected != have:
            (dest / name / ckpt_store.MARKER).unlink(missing_ok=True)
            raise SyncError(f"{dest / name}: files differ from its marker's list after the copy")
        moved.append(
            Moved(name, ckpt_store.step_of(name) or 0, len(have), sum(have.values()), verified=True)
        )
    return moved


def _filters(rules: list[str]) -> list[str]:
    """Inline `--filter` flags (first match wins), so a dry run shows every rule."""
    return [arg for rule in rules for arg in ("--filter", rule)]


def _transfer(rc: Rclone, source: str, dest: str, names: list[str]) -> None:
    marker = ckpt_store.MARKER
    data = _filters([f"- /*/{marker}", *(f"+ /{n}/**" for n in names), "- **"])
    markers = _filters([*(f"+ /{n}/{marker}" for n in names), "- **"])
    rc.run("copy", source, dest, *TUNED, *data, what=f"copy to {dest}")
    rc.run("check", source, dest, "--one-way", *data, what=f"check of {dest} against {source}")
    rc.run("copy", source, dest, *TUNED, *markers, what=f"copy of the markers to {dest}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ckpt_sync.py", description=__doc__)
    parser.add_argument("direction", choices=["push", "pull"])
    parser.add_argument("source")
    parser.add_argument("dest")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--latest", action="store_true")
    group.add_argument("--step", type=int)
    parser.add_argument("--env-file")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rc = Rclone(read_env_file(args.env_file), dry_run=args.dry_run)
    try:
        if args.direction == "push":
            moved = push(Path(args.source), args.dest, rc, latest=args.latest, step=args.step)
        else:
            moved = pull(args.source, Path(args.dest), rc, latest=args.latest, step=args.step)
    except SyncError as err:
        print(f"error: {err}")  # stdout: the caller turns it into its one-line error
        return 1
    report = {
        "direction": args.direction,
        "from": args.source,
        "to": args.dest,
        "checkpoints": [asdict(m) for m in moved],
        "would_run": rc.planned if args.dry_run else [],
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for argv_ in rc.planned:
            print(shlex.join(argv_))
        for m in moved:
            state = "already there" if m.skipped else ("planned" if args.dry_run else "verified")
            print(f"{m.name}: {m.files} file(s), {m.bytes} bytes, {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
