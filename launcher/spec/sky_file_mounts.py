"""SkyPilot's `file_mounts` read as SkyPilot reads them, for skypilot.py's translation into
gpujob's own field (spec/file_mounts.py checks and ships it): local sources only.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from launcher.spec.file_mounts import BUCKET_FIX
from launcher.spec.sky_lifecycle import hf_mount

if TYPE_CHECKING:
    from launcher.spec.skypilot import _Reader as Reader

ENV_REF = re.compile(r"\$\{?\b([a-zA-Z_][a-zA-Z0-9_]*)\b}?")


def sky_file_mounts(
    reader: Reader, envs: Mapping[str, str], environ: Mapping[str, str], cwd: str
) -> None:
    """Local sources as SkyPilot reads them (envs substituted, `~` expanded, relative to the
    current folder); `~/sky_workdir/...` is gpujob's workdir, so it becomes relative. A bucket
    (a URI, or SkyPilot's storage object) is refused with what to do instead."""
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
            if isinstance(src, Mapping) or not isinstance(src, str) or "://" in src:
                what = "a bucket mount (a storage object)" if isinstance(src, Mapping) else (
                    f"a bucket source ({src})" if isinstance(src, str) else f"{src!r}")  # fmt: skip
                raise reader.refuse(loc, f"{what} is not shipped by gpujob", BUCKET_FIX)
            path = ENV_REF.sub(lambda m: envs.get(m.group(1), m.group(0)), str(dst))
            if path.rstrip("/") == "~/sky_workdir":
                raise reader.refuse(loc, "the workdir itself is shipped as `workdir`",
                                    "give a path inside it, or another")  # fmt: skip
            path = path.removeprefix("~/sky_workdir/")
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
