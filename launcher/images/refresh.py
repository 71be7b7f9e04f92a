"""`gpujob image refresh-catalog`: learn from the PyTorch indexes which torch versions exist
for which CUDA variants and Python tags, and merge that into images/catalog.json. Online
only; when no index answers it changes nothing and says which URLs it tried."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from launcher.errors import GpujobError
from launcher.images.catalog import load_catalog
from launcher.resources import catalog_file

DEFAULT_ROOT = "https://download.pytorch.org/whl"
HREF = re.compile(r'href="([^"#]+)[^"]*"')


def torch_page_files(html: str) -> list[str]:
    """Wheel file names on a PEP 503 project page."""
    names = []
    for href in HREF.findall(html):
        name = urllib.request.url2pathname(href.rsplit("/", 1)[-1]).replace("%2B", "+")
        if name.endswith(".whl"):
            names.append(name)
    return names


def merge(catalog: dict, variant: str, files: list[str]) -> list[str]:
    """Add what the files show (version, variant, cp tag) to `catalog`; returns the changes."""
    changes = []
    for filename in files:
        try:
            _, version, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if version.is_prerelease or version.is_devrelease or version < Version("2.1"):
            continue
        plain = version.public
        row = catalog["torch"].setdefault(plain, {
            "variants": [], "pypi_cuda": None, "python": [], "torchvision": None,
            "torchaudio": None, "cxx11abi": "all", "platform": "manylinux_2_28_x86_64",
        })  # fmt: skip
        if variant not in row["variants"]:
            row["variants"] = sorted([*row["variants"], variant])
            changes.append(f"torch {plain}: +{variant}")
        for tag in tags:
            if tag.interpreter.startswith("cp3") and tag.interpreter not in row["python"]:
                row["python"] = sorted([*row["python"], tag.interpreter], key=lambda t: int(t[3:]))
                changes.append(f"torch {plain}: +{tag.interpreter}")
    return changes


def refresh(roots: list[str], path: Path | None = None) -> list[str]:
    path = path or catalog_file()
    catalog = load_catalog(path).data
    variants = sorted({v for row in catalog["torch"].values() for v in row["variants"]})
    tried: list[str] = []
    answered = 0
    changes: list[str] = []
    for root in roots or [DEFAULT_ROOT]:
        for variant in variants:
            url = f"{root.rstrip('/')}/{variant}/torch/"
            try:
                with urllib.request.urlopen(url, timeout=20) as reply:
                    html = reply.read().decode()
            except (OSError, urllib.error.URLError) as err:
                tried.append(f"{url} ({getattr(err, 'reason', err)})")
                continue
            answered += 1
            changes += merge(catalog, variant, torch_page_files(html))
    if not answered:
        raise GpujobError(
            f"no index reachable: tried {len(tried)} URLs, e.g. {tried[0]}; "
            f"{path.name} is unchanged",
            "run it where download.pytorch.org (or the --index given) answers",
        )
    path.write_text(json.dumps(catalog, indent=1, sort_keys=True) + "\n")
    return changes or [f"{path.name}: up to date ({answered} index pages read)"]
