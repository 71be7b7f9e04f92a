"""Helpers for the image tests: definitions from YAML text, and index snapshots rebuilt from
the checked-in locks (what the indexes offered when they were locked)."""

from __future__ import annotations

import json
from pathlib import Path

from planning import REPO

from launcher.images.catalog import load_catalog
from launcher.images.commands import Definition
from launcher.images.wheels import WheelRecord
from launcher.spec.image import load_definition_file

IMAGES = REPO / "launcher" / "images" / "definitions"
CATALOG = load_catalog(IMAGES / "catalog.json")
LOCKED = sorted(p.stem for p in IMAGES.glob("*.lock"))


def definition(tmp_path: Path, text: str, name: str = "t") -> Definition:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\n{text}")
    parsed, lines = load_definition_file(path)
    return Definition(path, parsed, lines, path.read_text())


def snapshot(lock_name: str) -> dict[str, list[WheelRecord]]:
    """The wheels a lock was made from, as an index would offer them (catalog-made entries
    left out: the resolver makes those itself)."""
    data = json.loads((IMAGES / f"{lock_name}.lock").read_text())
    offered: dict[str, list[WheelRecord]] = {}
    for p in data["packages"]:
        if p["source"].startswith("catalog"):
            continue
        requires = tuple(p["requires"]) if p["requires"] is not None else None
        record = WheelRecord(
            p["name"], p["version"], p["filename"], p["url"], p["sha256"], p["source"], requires
        )
        offered.setdefault(record.key, []).append(record)
    return offered
