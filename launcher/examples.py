"""The example jobs `gpujob init` writes into a folder: the files of the repository's `jobs/`.

`jobs/` is their only source. A wheel carries a copy made at build time (`setup.py` copies it
to `launcher/examples/`); a checkout reads `jobs/` itself. An example is one `NAME.yaml` plus
the folder its `workdir:` names, so the copy submits from where it lands as it does in `jobs/`.
Standard library and PyYAML only: `gpujob init` must start fast.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import GpujobError, UsageError

_PACKAGE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Example:
    name: str
    summary: str
    files: tuple[Path, ...]  # relative to the examples folder, the spec first


def examples_dir() -> Path:
    """The shipped copy inside an installed wheel, else `jobs/` of the checkout."""
    for where in (_PACKAGE / "examples", _PACKAGE.parent / "jobs"):
        if where.is_dir():
            return where
    raise GpujobError(
        "this gpujob has no example jobs (neither launcher/examples nor jobs/ is present)",
        "reinstall gpujob from its wheel",
    )


def list_examples(root: Path | None = None) -> list[Example]:
    root = examples_dir() if root is None else root
    return [_example(root, spec) for spec in sorted(root.glob("*.yaml"))]


def write_example(name: str, into: Path, root: Path | None = None) -> list[Path]:
    """Copy example `name` into `into`; refuse before writing anything if a file is there."""
    examples = {ex.name: ex for ex in list_examples(root)}
    if name not in examples:
        raise UsageError(
            f"no example named `{name}`",
            f"pick one of: {', '.join(examples)} (`gpujob init` lists them)",
        )
    root = examples_dir() if root is None else root
    example = examples[name]
    taken = [rel for rel in example.files if (into / rel).exists()]
    if taken:
        raise UsageError(
            f"{into / taken[0]} exists; gpujob init never overwrites a file",
            "run it in an empty folder, or move the file away",
        )
    for rel in example.files:
        _write_atomically(into / rel, (root / rel).read_bytes(), (root / rel).stat().st_mode)
    return [into / rel for rel in example.files]


def _example(root: Path, spec: Path) -> Example:
    import yaml

    text = spec.read_text()
    data = yaml.safe_load(text) or {}
    files = [spec.relative_to(root)]
    workdir = data.get("workdir") if isinstance(data, dict) else None
    if isinstance(workdir, str) and (root / workdir).is_dir():
        files += sorted(
            p.relative_to(root)
            for p in (root / workdir).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        )
    return Example(spec.stem, _summary(text), tuple(files))


def _summary(text: str, width: int = 80) -> str:
    """The first sentence of the spec's leading comment, cut to one line."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#") or line.startswith("#  "):
            break  # the comment ended, or its indented usage lines began
        lines.append(line.lstrip("#").strip())
    sentence = " ".join(lines)
    sentence = sentence.split(". ")[0].rstrip(".")
    if len(sentence) <= width:
        return sentence
    return sentence[:width].rsplit(" ", 1)[0].rstrip(",;") + " …"


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode & 0o777)
        os.link(tmp, path)  # fails if the file appeared meanwhile: never overwrite
    except FileExistsError:
        raise UsageError(f"{path} exists; gpujob init never overwrites a file") from None
    finally:
        os.unlink(tmp)
