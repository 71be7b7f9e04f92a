"""Read the package indexes pip is configured with (find-links folders, file:// and http(s)
simple indexes) into `WheelRecord`s: file name, URL, sha256 and Requires-Dist of each wheel
of the pinned versions. Hashes come from the index (its `#sha256=`) or from the file itself;
requirements from the wheel's METADATA or the index's PEP 658 metadata file."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from launcher.images.wheels import WheelRecord, best_wheel

PYPI = "https://pypi.org/simple"
ANCHOR = re.compile(r"<a\s+([^>]*)>([^<]+)</a>", re.I)
ATTR = re.compile(r'([\w-]+)="([^"]*)"')
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


@dataclass(frozen=True)
class Sources:
    """Where wheels are looked for, in pip's order: find-links folders, then indexes."""

    find_links: tuple[str, ...]
    indexes: tuple[str, ...]

    def offline(self) -> Sources:
        local = tuple(i for i in self.indexes if not i.startswith(("http://", "https://")))
        return Sources(self.find_links, local)


def pip_sources(python: str = sys.executable) -> Sources:
    """The machine's pip configuration (files and PIP_* variables), as `pip config list`."""
    done = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
    )
    values: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        option = key.rsplit(".", 1)[-1]
        values.setdefault(option, []).extend(value.strip("'\"").split())
    index = values.get("index-url", [PYPI])[:1]
    extra = values.get("extra-index-url", [])
    links = list(dict.fromkeys(values.get("find-links", [])))
    indexes = list(dict.fromkeys(index + extra))
    indexes.sort(key=lambda url: url.startswith(("http://", "https://")))  # local ones first
    return Sources(tuple(links), tuple(indexes))


def offered(
    names: Iterable[tuple[str, str]],
    sources: Sources,
    python: str,
    glibc: str,
    local_dirs: Iterable[Path] = (),
    on_pin: Callable[[str], None] = lambda _: None,
) -> dict[str, list[WheelRecord]]:
    """Wheels of each (name, version) pin; all versions seen are kept so a refusal can name
    the nearest, but the hash and metadata are read only for the file the target would take
    of the pinned version (one per local label: `2.3.1` and `2.3.1+cu121` are both kept)."""
    found: dict[str, list[WheelRecord]] = {}
    names = list(names)
    for done, (name, version) in enumerate(names):
        on_pin(f"{done} of {len(names)} pins read, now {name}")
        key = canonicalize_name(name.split("[")[0])
        records = []
        for link in sources.find_links:
            records += _folder(Path(urlparse(link).path if "://" in link else link), key)
        for index in sources.indexes:
            records += _index(index, key)
        pinned = {r.version for r in records if r.version.split("+")[0] == version.split("+")[0]}
        for each in sorted(pinned):
            best = best_wheel([r for r in records if r.version == each], python, glibc)
            if best is not None:
                records[records.index(best)] = _with_requires(best, list(local_dirs))
        found[key] = records
    return found


def _folder(folder: Path, key: str) -> list[WheelRecord]:
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob("*.whl")):
        parsed = _parse(path.name)
        if parsed and parsed[0] == key:
            records.append(
                WheelRecord(
                    parsed[0],
                    parsed[1],
                    path.name,
                    path.resolve().as_uri(),
                    None,
                    f"find-links {folder}",
                )
            )
    return records


def _index(index: str, key: str) -> list[WheelRecord]:
    page = f"{index.rstrip('/')}/{key}/"
    try:
        if page.startswith("file://"):
            path = Path(unquote(urlparse(page).path)) / "index.html"
            body, kind = (path.read_text() if path.is_file() else ""), "text/html"
        else:
            request = urllib.request.Request(page, headers={"Accept": JSON_ACCEPT})
            with urllib.request.urlopen(request, timeout=30) as reply:
                body, kind = reply.read().decode(), reply.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return []
        raise IndexUnreachable(f"{page}: HTTP {err.code}") from None
    except (OSError, urllib.error.URLError) as err:
        raise IndexUnreachable(f"{page}: {getattr(err, 'reason', err)}") from None
    files = _json_files(body) if "json" in kind else _html_files(body)
    records = []
    for filename, href, sha256 in files:
        parsed = _parse(filename)
        if parsed and parsed[0] == key:
            url = urljoin(page, href.split("#")[0])
            records.append(
                WheelRecord(parsed[0], parsed[1], filename, url, sha256, f"index {index}")
            )
    return records


class IndexUnreachable(OSError):
    """An index that did not answer: the caller says which, and what to do."""


def _json_files(body: str) -> list[tuple[str, str, str | None]]:
    data = json.loads(body)
    return [(f["filename"], f["url"], f.get("hashes", {}).get("sha256")) for f in data["files"]]


def _html_files(body: str) -> list[tuple[str, str, str | None]]:
    files = []
    for attrs, text in ANCHOR.findall(body):
        values = dict(ATTR.findall(attrs))
        href = values.get("href", "")
        sha = re.search(r"#sha256=([0-9a-f]{64})", href)
        files.append((text.strip(), href, sha.group(1) if sha else None))
    return files


def _parse(filename: str) -> tuple[str, str] | None:
    if not filename.endswith(".whl"):
        return None
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    return str(name), str(version)


def _with_requires(record: WheelRecord, local_dirs: list[Path]) -> WheelRecord:
    """The record with its sha256 and Requires-Dist filled in where they can be read: from
    the file (local), the index's PEP 658 metadata, or a local copy with the same hash."""
    sha256, requires = record.sha256, record.requires
    if record.url.startswith("file://"):
        path = Path(unquote(urlparse(record.url).path))
        if path.is_file():
            sha256 = sha256 or file_sha256(path)
            requires = _wheel_requires(path)
    else:
        requires = _remote_requires(record.url + ".metadata")
    if requires is None and sha256:
        copies = [d / sha256 / record.filename for d in local_dirs]
        copies += [d / record.filename for d in local_dirs]
        same = next((c for c in copies if c.is_file() and file_sha256(c) == sha256), None)
        requires = _wheel_requires(same) if same else None
    return WheelRecord(
        record.name,
        record.version,
        record.filename,
        record.url,
        sha256,
        record.source,
        requires,
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wheel_requires(path: Path) -> tuple[str, ...]:
    with zipfile.ZipFile(path) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        return _requires(wheel.read(name).decode())


def _remote_requires(url: str) -> tuple[str, ...] | None:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return _requires(reply.read().decode())
    except (OSError, urllib.error.URLError):
        return None


def _requires(metadata: str) -> tuple[str, ...]:
    return tuple(HeaderParser().parsestr(metadata).get_all("Requires-Dist") or ())
