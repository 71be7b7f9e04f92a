"""Fetch a lock's wheels into a content-addressed cache (`<cache>/wheels/<sha256>/<file>`),
each verified against the lock's sha256 before it is used. A cached wheel is used again
without a download; a wheel whose bytes do not match stops everything, before Docker runs."""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import unquote, urlparse

from launcher.errors import GpujobError
from launcher.images.index import file_sha256
from launcher.images.lock import Lock
from launcher.images.wheels import WheelRecord


class HashMismatch(GpujobError):
    """A wheel's bytes differ from its lock: never build (or push) from it."""


def wheel_dirs() -> list[Path]:
    """Extra folders to take a wheel from before downloading it (GPUJOB_WHEEL_DIRS, `:`-
    separated), e.g. a wheelhouse another tool already assembled; every file is verified."""
    raw = os.environ.get("GPUJOB_WHEEL_DIRS", "")
    return [Path(part) for part in raw.split(":") if part]


def require_known_hashes(lock: Lock, where: str) -> None:
    """Refuse a lock with a hash nobody could read: its wheel could be anything."""
    if lock.unknown_hashes:
        raise GpujobError(
            f"{where}: {len(lock.unknown_hashes)} wheel(s) have an unknown sha256 "
            f"({lock.unknown_hashes[0]}, ...); refusing to build from wheels nobody verified",
            f"lock it where those indexes answer (gpujob image lock {lock.name}), or add the "
            "hashes to images/catalog.json known_wheels",
        )


def fetch(
    lock: Lock,
    cache: Path,
    report: Callable[[str], None],
    extra_dirs: Iterable[Path] = (),
) -> list[Path]:
    """Every wheel of `lock`, verified, as paths in the cache (in lock order)."""
    require_known_hashes(lock, lock.name)
    dirs = list(extra_dirs) + wheel_dirs()
    paths = []
    fetched = 0
    for wheel in lock.packages:
        assert wheel.sha256 is not None
        target = cache / "wheels" / wheel.sha256 / wheel.filename
        if not target.is_file():
            _fetch_one(wheel, target, dirs)
            fetched += 1
        paths.append(target)
    report(
        f"wheelhouse: {len(paths)} wheels verified ({fetched} fetched, "
        f"{len(paths) - fetched} cached)"
    )
    return paths


def _fetch_one(wheel: WheelRecord, target: Path, dirs: list[Path]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, scratch_name = tempfile.mkstemp(dir=target.parent, suffix=".part")
    os.close(handle)
    scratch = Path(scratch_name)
    try:
        local = next((d / wheel.filename for d in dirs if (d / wheel.filename).is_file()), None)
        if local is not None:
            shutil.copyfile(local, scratch)
            origin = str(local)
        elif wheel.url.startswith("file://"):
            origin = unquote(urlparse(wheel.url).path)
            shutil.copyfile(origin, scratch)
        else:
            origin = wheel.url
            with urllib.request.urlopen(wheel.url, timeout=120) as reply, scratch.open("wb") as out:
                shutil.copyfileobj(reply, out, 1 << 20)
        actual = file_sha256(scratch)
        if actual != wheel.sha256:
            raise HashMismatch(
                f"{wheel.filename}: sha256 {actual} from {origin} does not match the lock's "
                f"{wheel.sha256}; nothing was built or pushed",
                "find out why the file changed; if the new file is right, lock again",
            )
        scratch.replace(target)
    except OSError as err:
        raise GpujobError(f"{wheel.filename}: cannot fetch {wheel.url}: {err}") from None
    finally:
        scratch.unlink(missing_ok=True)


def link_into(wheels: list[Path], folder: Path) -> None:
    """Put the cached wheels in a build context: hard links (no copy of a 200 MB torch)
    where the cache and the context share a filesystem, copies elsewhere."""
    folder.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        (folder / wheel.name).unlink(missing_ok=True)
        try:
            os.link(wheel, folder / wheel.name)
        except OSError:
            shutil.copyfile(wheel, folder / wheel.name)
