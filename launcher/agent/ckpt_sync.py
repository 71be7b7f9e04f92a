"""Move complete checkpoints between a folder and S3 with rclone, and prove they arrived.

Stdlib only and shipped beside the agent: the agent pushes from the host as checkpoints land,
and `gpujob sync-ckpt` runs this same file on the job's host (or here, for local jobs), so
one implementation decides what moves and how it is checked.

Order of a push, per batch of checkpoints: copy the data (markers excluded), `rclone check`
it (sizes and MD5s), list it against the files each marker promises, then upload the markers.
A marker in S3 therefore means a verified copy; a push cut off at any point leaves a prefix
without one, which nobody counts as a checkpoint.

The host's copy can vanish mid-push: the training program prunes its own checkpoints
(save_total_limit, the quickstart's keep_last), and `rclone copy` then still exits 0 (its
retries list the folder again and find nothing left to send), `rclone check --one-way` finds
nothing to compare, and no marker is sent. Nobody would ever push that checkpoint again, so
the push itself removes what it left in S3 (`Moved.dropped`), and `discard` does it later
for a push that failed before it could.

A pull copies data, checks it against S3 and against the marker's file list, then the marker.
verl's `latest_checkpointed_iteration.txt` goes up after the checkpoint it names, and a pull
from a bucket that has one writes it naming the newest checkpoint pulled (ckpt_tracker.py).

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
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ckpt_store
from ckpt_rclone import TUNED, Rclone, SyncError, rcat, rclone_env, read_env_file
from ckpt_tracker import pull_tracker, push_tracker

__all__ = ["TUNED", "Moved", "Rclone", "SyncError", "rcat", "rclone_env", "read_env_file"]


@dataclass
class Moved:
    name: str
    step: int
    files: int
    bytes: int
    skipped: bool = False
    verified: bool = False
    dropped: bool = False
    """Deleted on the host during its push: what the push had sent of it was removed (a copy
    whole under its own, older marker would have stayed)."""


@dataclass(frozen=True)
class _Sent:
    """One checkpoint's promise as a push read it before copying: its marker's MD5 and the
    files that marker lists. Read once, so that S3 and the host are both held to the same
    promise when the push decides whether the checkpoint landed or was deleted under it."""

    path: Path
    marker_md5: str
    files: dict[str, int]

    @classmethod
    def read(cls, path: Path) -> _Sent:
        body = (path / ckpt_store.MARKER).read_bytes()
        try:
            listed = json.loads(body)["files"]
            files = {str(rel): int(size) for rel, size in listed.items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            files = ckpt_store.files_of(path)  # a marker without a usable list: the folder's
        return cls(path, hashlib.md5(body).hexdigest(), files)

    def intact(self) -> bool:
        """The host still holds what was promised: a folder being deleted (rmtree goes file by
        file, the marker maybe last) or already gone is not, nor one saved again since."""
        try:
            body = (self.path / ckpt_store.MARKER).read_bytes()
            have = ckpt_store.files_of(self.path)
        except OSError:
            return False
        return hashlib.md5(body).hexdigest() == self.marker_md5 and _holds(have, self.files)


def _holds(have: dict[str, int], promised: dict[str, int]) -> bool:
    return all(have.get(rel) == size for rel, size in promised.items())


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


def _listing(rc: Rclone, remote: str, names: list[str]) -> dict[str, dict[str, int]]:
    """name -> {file: size} of what S3 holds under `remote/name`, marker included. Sizes only:
    MD5s of multipart objects would cost a HEAD each, and `rclone check` compared those."""
    out = rc.run(
        "lsjson",
        remote,
        "-R",
        "--files-only",
        "--no-modtime",
        "--no-mimetype",
        *_filters([*(f"+ /{n}/**" for n in names), "- **"]),
        what=f"listing {remote}",
        capture=True,
        changes=False,
    )
    found: dict[str, dict[str, int]] = {}
    for item in json.loads(out or "[]"):
        name, _, rel = item["Path"].partition("/")
        found.setdefault(name, {})[rel] = int(item["Size"])
    return found


def _whole_there(rc: Rclone, remote: str, name: str, there: dict[str, int]) -> bool:
    """A copy complete under its own marker (an earlier push of an older save of that name):
    not this push's leftover, so it stays."""
    if ckpt_store.MARKER not in there:
        return False
    marker = f"{remote}/{name}/{ckpt_store.MARKER}"
    try:
        body = rc.run("cat", marker, what=f"reading {marker}", capture=True, changes=False)
        promised = {str(k): int(v) for k, v in json.loads(body)["files"].items()}
    except (SyncError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return _holds(there, promised)


def _remove_partial(rc: Rclone, remote: str, name: str, there: dict[str, int]) -> None:
    where = f"{remote}/{name}"
    if ckpt_store.MARKER in there:  # first, so no reader meets a marker over half a folder
        rc.run("deletefile", f"{where}/{ckpt_store.MARKER}", what=f"removal of {where}'s marker")
    rc.run("purge", where, what=f"removal of the partial copy {where}")


def discard(rc: Rclone, remote: str, names: list[str]) -> list[str]:
    """Remove what pushes of `names` left in S3 without its marker; the caller knows they are
    gone from the host, so no push will ever finish them. A copy whole under its own marker
    stays. Returns the names whose leftovers were removed."""
    if not names:
        return []
    arrived = _listing(rc, remote, names)
    removed = []
    for name in names:
        there = arrived.get(name)
        if there and not _whole_there(rc, remote, name, there):
            _remove_partial(rc, remote, name, there)
            removed.append(name)
    return removed


def prune_remote(
    rc: Rclone, remote: str, keep_last: int, ours: set[str], fresh: set[str]
) -> list[str]:
    """`keep_last` in the bucket too, over the copies this push's caller made and verified
    (`ours`): those beyond the newest `keep_last`, oldest step first, marker first (a reader
    never meets a marker over half a folder). What else sits under the prefix (an earlier
    run's checkpoints, maybe of higher steps) is never counted nor deleted: counted, it would
    make the copy just pushed look old. The newest of ours and any name of the push just
    made (`fresh`) are never removed; folders without a marker are left to `discard`."""
    there = [name for name in remote_markers(rc, remote) if name in ours]
    ordered = sorted(there, key=lambda n: ckpt_store.step_of(n) or 0)
    doomed = [name for name in ordered[: -max(keep_last, 1)] if name not in fresh]
    for name in doomed:
        where = f"{remote}/{name}"
        rc.run("deletefile", f"{where}/{ckpt_store.MARKER}", what=f"removal of {where}'s marker")
        rc.run("purge", where, what=f"retention of {where}")
    return doomed


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
    moved: list[Moved] = []
    todo: dict[str, _Sent] = {}
    for name in wanted:
        ckpt = local[name]
        try:
            sent = _Sent.read(ckpt.path)
        except OSError:
            continue  # deleted since the scan: nothing of it was sent
        item = Moved(name, ckpt.step, len(sent.files), sum(sent.files.values()))
        if there.get(name) == sent.marker_md5:
            item.skipped = item.verified = True
        else:
            todo[name] = sent
        moved.append(item)
    if todo:
        dropped = _send(rc, str(root), remote, todo)
        for item in moved:
            item.dropped = item.name in dropped
            item.verified = not item.dropped
    landed = set(there) | {m.name for m in moved if m.verified and not m.dropped}
    push_tracker(rc, root, remote, landed)
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
        if not _holds(have, expected):  # more is fine: a hook's metrics.csv (ckpt_logs)
            (dest / name / ckpt_store.MARKER).unlink(missing_ok=True)
            raise SyncError(f"{dest / name}: files differ from its marker's list after the copy")
        moved.append(
            Moved(name, ckpt_store.step_of(name) or 0, len(have), sum(have.values()), verified=True)
        )
    if not rc.dry_run:
        pull_tracker(rc, remote, dest, names)
    return moved


def _filters(rules: list[str]) -> list[str]:
    """Inline `--filter` flags (first match wins), so a dry run shows every rule."""
    return [arg for rule in rules for arg in ("--filter", rule)]


def _data_filters(names: list[str]) -> list[str]:
    return _filters([f"- /*/{ckpt_store.MARKER}", *(f"+ /{n}/**" for n in names), "- **"])


def _marker_filters(names: list[str]) -> list[str]:
    return _filters([*(f"+ /{n}/{ckpt_store.MARKER}" for n in names), "- **"])


def _transfer(rc: Rclone, source: str, dest: str, names: list[str]) -> None:
    data, markers = _data_filters(names), _marker_filters(names)
    rc.run("copy", source, dest, *TUNED, *data, what=f"copy to {dest}")
    rc.run("check", source, dest, "--one-way", *data, what=f"check of {dest} against {source}")
    rc.run("copy", source, dest, *TUNED, *markers, what=f"copy of the markers to {dest}")


def _send(rc: Rclone, root: str, remote: str, todo: dict[str, _Sent]) -> set[str]:
    """A push's transfer: data, check, then markers only for checkpoints whose data in S3
    holds what their marker promises and whose host copy still does (a folder listed by
    rclone half-deleted checks clean against itself). Returns the checkpoints deleted on the
    host meanwhile, their partial copies removed; raises if one still here did not land."""
    names = list(todo)
    data = _data_filters(names)
    failed: SyncError | None = None
    try:
        rc.run("copy", root, remote, *TUNED, *data, what=f"copy to {remote}")
        rc.run("check", root, remote, "--one-way", *data, what=f"check of {remote} against {root}")
    except SyncError as err:
        failed = err  # maybe only a folder deleted under rclone: settled below
    if rc.dry_run:
        _copy_markers(rc, root, remote, names)
        return set()
    if failed is None:
        arrived = _listing(rc, remote, names)
        ready = [n for n in names if _holds(arrived.get(n, {}), todo[n].files) and todo[n].intact()]
        try:
            _copy_markers(rc, root, remote, ready)
        except SyncError as err:
            failed = err
    return _settle(rc, remote, todo, failed)


def _copy_markers(rc: Rclone, root: str, remote: str, names: list[str]) -> None:
    if names:
        markers = _marker_filters(names)
        rc.run("copy", root, remote, *TUNED, *markers, what=f"copy of the markers to {remote}")


def _settle(rc: Rclone, remote: str, todo: dict[str, _Sent], failed: SyncError | None) -> set[str]:
    """Each checkpoint either landed (the marker read at the start, over the files it lists),
    or is gone from the host and its leftovers are removed, or it is an error to retry."""
    names = list(todo)
    there, arrived = remote_markers(rc, remote), _listing(rc, remote, names)
    dropped, missing = set(), []
    for name, sent in todo.items():
        files = arrived.get(name, {})
        if there.get(name) == sent.marker_md5 and _holds(files, sent.files):
            continue
        if sent.intact():
            missing.append(name)
            continue
        if files and not _whole_there(rc, remote, name, files):
            _remove_partial(rc, remote, name, files)
        dropped.add(name)
    if missing:
        raise failed or SyncError(
            f"{', '.join(missing)}: not whole in {remote} after the push (files missing or "
            "of other sizes than the marker lists)"
        )
    return dropped


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
            if m.dropped:
                state = "deleted here during the push; its partial copy was removed"
            print(f"{m.name}: {m.files} file(s), {m.bytes} bytes, {state}")
        tracker = Path(args.dest) / ckpt_store.VERL_TRACKER
        if args.direction == "pull" and not args.dry_run and tracker.is_file():
            print(f"{ckpt_store.VERL_TRACKER}: {tracker.read_text().strip()} (verl's tracker)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
