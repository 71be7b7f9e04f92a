"""`file_mounts`: files and folders of this machine shipped to every node at a path there
(SkyPilot's field, skypilot-task.md §5.2; a bucket source is spec/bucket_mounts.py's). A
destination is absolute, in the host's home (`~/data`), or relative to the job's workdir
(SkyPilot's `~/sky_workdir`).

The sources are this machine's, read when the spec loads (as the workdir is): one that does
not exist is refused at its line, and a folder is marked with a trailing `/` so planning
knows what to ship (its contents, into the destination) without touching the disk.
"""

from __future__ import annotations

import os
from pathlib import Path

from launcher.spec.bucket_mounts import BucketMount, local_mounts
from launcher.spec.run import FieldError


def destination_problem(dst: str) -> str | None:
    if "://" in dst:
        return "a bucket is not a destination; give a path on the host"
    if not dst or dst.endswith("/") or dst in (".", "~"):
        return "give a path on the host that does not end in `/` (SkyPilot refuses it too)"
    if ".." in dst.split("/"):
        return "no `..` in a destination"
    return None


def checked_mounts(mounts: dict[str, str | BucketMount]) -> dict[str, str | BucketMount]:
    """Each destination with its local source made absolute; a folder's ends in `/`. A
    bucket (spec/bucket_mounts.py) is resolved at submit, not here."""
    out: dict[str, str | BucketMount] = {}
    for dst, src in mounts.items():
        loc = ("file_mounts", dst)
        problem = destination_problem(dst)
        if problem:
            raise FieldError(loc, problem)
        if isinstance(src, BucketMount):
            out[dst] = src
            continue
        path = Path(os.path.normpath(os.path.expanduser(src)))
        if not path.is_absolute():
            raise FieldError(loc, f"{src}: give the local file or folder as an absolute path "
                             "(or `~/...`)")  # fmt: skip
        try:
            found, is_dir = path.exists(), path.is_dir()
        except OSError as err:  # a name too long for the file system, a loop of links
            raise FieldError(loc, f"{src}: cannot look at it: {err.strerror}") from None
        if not found:
            raise FieldError(loc, f"{path} does not exist on this machine; create it, or fix "
                             "the path (a file or folder shipped to every node)")  # fmt: skip
        out[dst] = f"{str(path).rstrip('/')}/" if is_dir else str(path)
    return out


def file_modes(mounts: dict[str, str | BucketMount]) -> dict[str, int]:
    """Each single file's permission bits (`checked_mounts`'s output), read with the spec so
    the copy on the host keeps them: a 0600 credentials file stays 0600, a script stays
    executable (a folder's files keep theirs as the workdir's do)."""
    return {
        dst: os.stat(src).st_mode & 0o777
        for dst, src in local_mounts(mounts).items()
        if not src.endswith("/")
    }
