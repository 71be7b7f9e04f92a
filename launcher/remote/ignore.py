"""Which workdir files ship: `.gpujobignore` and `.gitignore` patterns, gitignore-style.

Pure (given the pattern text): a pattern without a slash matches a name at any depth, a
leading slash anchors it to the workdir, a trailing slash matches directories only, and `!`
re-includes. Enough of gitignore for workdirs; not a full reimplementation.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILES = (".gitignore", ".gpujobignore")


@dataclass(frozen=True)
class Pattern:
    glob: str
    anchored: bool
    dir_only: bool
    negated: bool

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        if self.anchored or "/" in self.glob:
            return fnmatch.fnmatchcase(rel, self.glob)
        return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], self.glob)


def parse_patterns(lines: list[str]) -> list[Pattern]:
    patterns = []
    for raw in lines:
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line.removeprefix("!")
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = line.startswith("/")
        patterns.append(Pattern(line.lstrip("/"), anchored, dir_only, negated))
    return patterns


def ignored(rel: str, is_dir: bool, patterns: list[Pattern]) -> bool:
    verdict = False
    for pattern in patterns:
        if pattern.matches(rel, is_dir):
            verdict = not pattern.negated
    return verdict


def shipped_files(root: Path, extra: tuple[str, ...] = ()) -> Iterator[str]:
    """Relative paths of the files to ship, directories pruned as soon as they are ignored."""
    lines = list(extra)
    for name in IGNORE_FILES:
        path = root / name
        if path.is_file():
            lines.extend(path.read_text().splitlines())
    patterns = parse_patterns(lines)
    for folder, dirs, files in os.walk(root):
        base = os.path.relpath(folder, root)
        base = "" if base == "." else base + "/"
        dirs[:] = sorted(d for d in dirs if not ignored(base + d, True, patterns))
        for name in sorted(files):
            if not ignored(base + name, False, patterns):
                yield base + name
