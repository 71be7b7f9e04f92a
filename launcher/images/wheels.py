"""Wheels as records (name, version, file, where, hash, requirements) and which of them a
target interpreter can install: the pure half of reading an index."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename

from launcher.images.catalog import Catalog


@dataclass(frozen=True)
class WheelRecord:
    """One wheel file as an index (or the catalog) knows it. `sha256` None: not known here."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str | None
    source: str
    requires: tuple[str, ...] | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WheelRecord:
        """A lock's package entry (JSON lists where the record holds tuples)."""
        requires = data.get("requires")
        return cls(**{**data, "requires": None if requires is None else tuple(requires),
                      "notes": tuple(data.get("notes", ()))})  # fmt: skip

    def locked(self) -> WheelRecord:
        """As a lock holds it: requirements sorted, so the lock's text is reproducible."""
        requires = None if self.requires is None else tuple(sorted(self.requires))
        return replace(self, requires=requires)


def target_tags(python: str, glibc: str = "2.28") -> list[Tag]:
    """Tags a CPython `python` on x86_64 Linux with at least `glibc` accepts, best first."""
    nodot = python.replace(".", "")
    major, minor = (int(part) for part in glibc.split("."))
    platforms = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    platforms += [
        "manylinux2014_x86_64",
        "manylinux2010_x86_64",
        "manylinux1_x86_64",
        "linux_x86_64",
    ]
    tags: list[Tag] = []
    for plat in platforms:
        tags.append(Tag(f"cp{nodot}", f"cp{nodot}", plat))
        tags.append(Tag(f"cp{nodot}", "abi3", plat))
        tags += [Tag(f"cp3{m}", "abi3", plat) for m in range(int(nodot[1:]) - 1, 1, -1)]
        tags.append(Tag(f"py{nodot}", "none", plat))
        tags.append(Tag("py3", "none", plat))
    tags += [
        Tag(f"cp{nodot}", "none", "any"),
        Tag(f"py{nodot}", "none", "any"),
        Tag("py3", "none", "any"),
        Tag("py2.py3", "none", "any"),
    ]
    return tags


def best_wheel(records: list[WheelRecord], python: str, glibc: str) -> WheelRecord | None:
    """The record pip would prefer for this interpreter (most specific tag), or None; among
    equals, one with a known hash, then the first source (local ones come first)."""
    order = {tag: rank for rank, tag in enumerate(target_tags(python, glibc))}
    ranked: list[tuple[int, int, int, WheelRecord]] = []
    for position, record in enumerate(records):
        tags = parse_wheel_filename(record.filename)[3]
        best = min((order[tag] for tag in tags if tag in order), default=None)
        if best is not None:
            known = 0 if record.sha256 else 1
            ranked.append((best, known, position, record))
    return min(ranked, key=lambda item: item[:3])[3] if ranked else None


def torch_family_wheel(
    catalog: Catalog, package: str, version: str, variant: str, python: str, torch: str
) -> WheelRecord:
    """The download.pytorch.org file of `package` (torch, torchvision, torchaudio) for a CUDA
    variant, named the way that index names them; its hash is the catalog's, if any."""
    cp = f"cp{python.replace('.', '')}"
    platform = catalog.torch(torch)["platform"]  # type: ignore[index]
    if catalog.cxx11abi(torch, variant) and platform == "linux_x86_64":
        platform = "manylinux_2_28_x86_64"
    filename = f"{package}-{version}+{variant}-{cp}-{cp}-{platform}.whl"
    base = catalog.data["indexes"]["pytorch"].format(variant=variant)
    return WheelRecord(
        name=package,
        version=f"{version}+{variant}",
        filename=filename,
        url=f"{base}/{quote(filename)}",
        sha256=catalog.known_hash(filename),
        source=f"catalog ({base})",
    )


def flash_attn_wheel(
    catalog: Catalog, version: str, cuda_tag: str, torch_minor: str, abi: bool, python: str
) -> WheelRecord:
    """The GitHub release asset flash-attn's setup.py would download for this torch."""
    cp = f"cp{python.replace('.', '')}"
    local = f"cu{cuda_tag}torch{torch_minor}cxx11abi{str(abi).upper()}"
    filename = f"flash_attn-{version}+{local}-{cp}-{cp}-linux_x86_64.whl"
    url = catalog.data["indexes"]["flash_attn"].format(version=version, filename=filename)
    return WheelRecord(
        name="flash-attn",
        version=f"{version}+{local}",
        filename=filename,
        url=url,
        sha256=catalog.known_hash(filename),
        source="catalog (GitHub release asset)",
    )
