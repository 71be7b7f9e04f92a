"""SkyPilot's `file_mounts` read as SkyPilot reads them, for skypilot.py's translation into
gpujob's own field (spec/file_mounts.py checks and ships a local source; a bucket is
spec/bucket_mounts.py's).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from launcher.spec.sky_lifecycle import hf_mount

if TYPE_CHECKING:
    from launcher.spec.skypilot import _Reader as Reader

ENV_REF = re.compile(r"\$\{?\b([a-zA-Z_][a-zA-Z0-9_]*)\b}?")


def sky_file_mounts(
    reader: Reader, envs: Mapping[str, str], environ: Mapping[str, str], cwd: str
) -> None:
    """Local sources as SkyPilot reads them (envs substituted, `~` expanded, relative to the
    current folder); `~/sky_workdir/...` is gpujob's workdir, so it becomes relative. A bucket
    (a URI, or SkyPilot's storage object) goes over as written, its envs substituted."""
    mounts = reader.data["file_mounts"]
    if not isinstance(mounts, Mapping):
        raise reader.refuse(("file_mounts",), "it must be a mapping of destination: source",
                            "write one")  # fmt: skip
    for dst, src in mounts.items():
        with reader.collect():
            loc = ("file_mounts", str(dst))
            if isinstance(src, str) and src.startswith("hf://"):
                hf_mount(reader, loc, src, envs)
                continue
            bucket = isinstance(src, Mapping) or (isinstance(src, str) and "://" in src)
            if not bucket and not isinstance(src, str):
                raise reader.refuse(loc, f"{src!r} is neither a path nor a bucket",
                                    "give a local path, a bucket URL, {source, mode}")  # fmt: skip
            path = ENV_REF.sub(lambda m: envs.get(m.group(1), m.group(0)), str(dst))
            if path.rstrip("/") == "~/sky_workdir":
                raise reader.refuse(loc, "the workdir itself is shipped as `workdir`",
                                    "give a path inside it, or another")  # fmt: skip
            path = path.removeprefix("~/sky_workdir/")
            if bucket:
                reader.put(("file_mounts", path), loc, sky_bucket(src, envs),
                           why=f" ({bucket_note(src)})")  # fmt: skip
                if isinstance(src, Mapping) and src.get("persistent") is False:
                    reader.out.warnings.append(
                        f"{reader.where(*loc)}: {'.'.join(loc)}.persistent: false: gpujob "
                        "never deletes a bucket (SkyPilot deletes this one at `down`); "
                        "delete it yourself when done")  # fmt: skip
                continue
            why = f" ({src} read from the current folder; shipped to every node"
            if not path.startswith(("/", "~")):
                why += ", under the job's workdir (SkyPilot's ~/sky_workdir)"
            elif path.startswith("/") and not path.startswith("/tmp/"):
                why += ", put there by the host's login user without sudo (SkyPilot uses sudo): "
                why += "that user must be able to create it, or use a path under ~/"
            source = posixpath.normpath(sky_path(src, envs, environ, cwd))
            reader.put(("file_mounts", path), loc, source, why=why + ")")


def sky_path(value: str, envs: Mapping[str, str], environ: Mapping[str, str], cwd: str) -> str:
    """SkyPilot's reading: the task's envs substituted (unknown names stay as written), `~`
    expanded, then relative to the current folder."""
    path = ENV_REF.sub(lambda m: envs.get(m.group(1), m.group(0)), value)
    if (path == "~" or path.startswith("~/")) and environ.get("HOME"):
        path = environ["HOME"] + path[1:]
    return str(PurePosixPath(cwd) / path)


def sky_bucket(src: Any, envs: Mapping[str, str]) -> Any:
    """A bucket URI or storage object with the task's envs substituted in its strings, as
    SkyPilot does in `source` and `name`; gpujob's spec checks the rest."""

    def sub(text: Any) -> Any:
        return ENV_REF.sub(lambda m: envs.get(m.group(1), m.group(0)), text) if isinstance(
            text, str) else text  # fmt: skip

    if isinstance(src, Mapping):
        return {key: sub(value) if key in ("source", "name") else value
                for key, value in src.items()}  # fmt: skip
    return sub(src)


def bucket_note(src: Any) -> str:
    mode = src.get("mode", "MOUNT") if isinstance(src, Mapping) else "COPY"
    what = src.get("source") or src.get("name") if isinstance(src, Mapping) else src
    then = {"COPY": "fetched onto every node before setup",
            "MOUNT_CACHED": "fetched before setup; what the job writes there is uploaded on "
            "each checkpoint and at the end"}.get(str(mode), "rclone mount where the host has "
            "FUSE, else fetched and uploaded as MOUNT_CACHED")  # fmt: skip
    return f"bucket {what}, {mode}: {then}"
