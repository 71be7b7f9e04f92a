"""The offline facts the resolver needs (`images/catalog.json`), with the questions asked of
them. The file is data, refreshed from the indexes by `gpujob image refresh-catalog`, so a
release PyTorch publishes tomorrow needs no code change."""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from packaging.version import Version


@dataclass(frozen=True)
class FlashAttnRow:
    """A flash-attn release and the torch, CUDA and Python builds it ships wheels for; the
    ABI its wheels need (`correct_abi`), so a mismatched torch build is refused up front."""

    version: str
    torch: str
    cuda: tuple[str, ...]
    python: tuple[str, ...]
    correct_abi: str


@dataclass(frozen=True)
class Catalog:
    data: dict[str, Any]

    @cached_property
    def sha256(self) -> str:
        """Hash of the canonical JSON: a lock names the facts it was resolved with."""
        text = json.dumps(self.data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def torch(self, version: str) -> dict[str, Any] | None:
        return self.data["torch"].get(version)

    def torch_versions(self) -> list[str]:
        return sorted(self.data["torch"], key=Version)

    def cxx11abi(self, version: str, variant: str) -> bool:
        """Torch ≤ 2.5 is pre-cxx11; 2.6 is cxx11 only in its cu126 build; 2.7 on all cxx11."""
        mode = self.torch(version)["cxx11abi"]  # type: ignore[index]
        return mode == "all" or mode == variant

    @cached_property
    def flash_attn_rows(self) -> list[FlashAttnRow]:
        return [
            FlashAttnRow(
                r["version"], r["torch"], tuple(r["cuda"]), tuple(r["python"]), r["correct_abi"]
            )
            for r in self.data["flash_attn"]
        ]

    def flash_attn_versions(self) -> list[str]:
        return sorted({row.version for row in self.flash_attn_rows}, key=Version)

    def flash_attn_cuda_tag(self, version: str, cuda_major: str) -> str | None:
        """The `cu..` label flash-attn's setup.py derives from torch.version.cuda's major."""
        for rule in self.data["flash_attn_cuda_tag"]:
            if Version(rule["from"]) <= Version(version) <= Version(rule["to"]):
                return rule["map"].get(cuda_major)
        return None

    def base_image(self, reference: str) -> dict[str, Any] | None:
        for entry in self.data["base_images"]:
            if fnmatch.fnmatch(reference, entry["match"]):
                return entry
        return None

    def known_hash(self, filename: str) -> str | None:
        return self.data.get("known_wheels", {}).get(filename)

    def driver_floor(self, cuda_major: str) -> str | None:
        return self.data["driver_floor"].get(cuda_major)

    def toolkit_driver(self, cuda: str) -> str | None:
        return self.data["toolkit_driver"].get(cuda)


def load_catalog(path: Path | None = None) -> Catalog:
    if path is None:
        from launcher.resources import catalog_file

        path = catalog_file()
    return Catalog(json.loads(path.read_text()))


def cuda_version(variant: str) -> str | None:
    """`cu121` -> `12.1`, `cu130` -> `13.0`; None for cpu."""
    if not variant.startswith("cu"):
        return None
    digits = variant[2:]
    return f"{digits[:-1]}.{digits[-1]}"
