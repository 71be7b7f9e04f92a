"""What `gpujob image ...` runs: read a definition, resolve it, write or read its lock. The
CLI only parses flags and prints; errors are GpujobError with the file, line and fix."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import GpujobError, UsageError
from launcher.images import index, rules, wheelhouse
from launcher.images.buildplan import BuildPlan, plan_build
from launcher.images.catalog import Catalog, load_catalog
from launcher.images.lock import Lock, parse_lock
from launcher.images.resolve import Refused, pins_of, resolve
from launcher.images.rules import Refusal, stack_of
from launcher.paths import images_cache_dir
from launcher.resources import builtin_images_dir, catalog_file, images_dir_for
from launcher.spec.image import ImageDefinition, load_definition_file


@dataclass(frozen=True)
class Definition:
    path: Path
    definition: ImageDefinition
    lines: dict[str, int]
    text: str

    def where(self, field: str) -> str:
        line = self.lines.get(field) or self.lines.get(field.split(".")[0])
        return f"{self.path}:{line}" if line else str(self.path)


def images_folder(name: str, images: Path | None = None) -> Path:
    """`images` when given; else the current folder's own `images/` where it holds `name`,
    else the definitions shipped with gpujob."""
    return images if images is not None else images_dir_for(name, Path.cwd())


def catalog_for(images: Path) -> Catalog:
    """The folder's own `catalog.json`, else the shipped one."""
    own = images / "catalog.json"
    return load_catalog(own if own.is_file() else catalog_file())


def definition_path(name: str, images: Path | None = None) -> Path:
    images = images_folder(name, images)
    path = Path(name) if name.endswith((".yaml", ".yml")) else images / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in images.glob("*.yaml")))
        raise UsageError(f"image `{name}`: no definition {path}", f"known: {known}")
    return path


def read_definition(name: str, images: Path | None = None) -> Definition:
    path = definition_path(name, images)
    definition, lines = load_definition_file(path)
    return Definition(path, definition, lines, path.read_text())


def lock_for(
    found: Definition, catalog: Catalog, sources: index.Sources, glibc: str = "2.28"
) -> Lock:
    """Resolve a definition against the catalog and the wheels `sources` offer."""
    definition = found.definition
    early = rules.check(definition, catalog)  # refused in a second, before any index is read
    if early:
        raise _refusal_error(found, early)
    stack, _ = stack_of(definition)
    pins = [(name, version) for _, name, version in pins_of(definition, stack)]
    sources = index.Sources(sources.find_links, (*sources.indexes, *definition.indexes))
    from launcher.progress import waiting

    try:
        local = [images_cache_dir() / "wheels", *wheelhouse.wheel_dirs()]
        with waiting(f"locking {definition.name}: reading the package indexes") as wait:
            offered = index.offered(pins, sources, definition.python, glibc, local, wait.note)
    except index.IndexUnreachable as err:
        raise GpujobError(
            f"{found.path}: an index did not answer: {err}",
            "check the network, or lock with --offline (local indexes only)",
        ) from None
    try:
        return resolve(definition, catalog, offered, found.text, glibc)
    except Refused as refused:
        raise _refusal_error(found, refused.refusals) from None


def _refusal_error(found: Definition, refusals: list[Refusal]) -> UsageError:
    """One line: where, which field, what rule, the nearest pins; other rules by name."""
    first, more = refusals[0], refusals[1:]
    also = f" (also: {', '.join(r.rule for r in more)})" if more else ""
    return UsageError(f"{found.where(first.field)}: {first.field}: {first.text()}{also}")


def write_lock(
    name: str, offline: bool = False, images: Path | None = None,
    report: Callable[[str], None] | None = None,
) -> tuple[Path, Lock]:  # fmt: skip
    """The lock goes next to the definition the user gave. A definition shipped with gpujob
    (a name found only there) is locked into `./images/`, with a copy of the definition
    beside it: gpujob's own files, in site-packages, are never written."""
    images = images_folder(name, images)
    found = read_definition(name, images)
    sources = index.pip_sources()
    lock = lock_for(found, catalog_for(images), sources.offline() if offline else sources)
    path, copy = lock_place(found.path, Path.cwd())
    if copy is not None and not copy.exists():
        copy.parent.mkdir(exist_ok=True)
        _write_atomically(copy, found.text)
        if report:
            report(f"copied gpujob's definition of `{found.path.stem}` to {copy}")
    _write_atomically(path, lock.to_text())
    return path, lock


def lock_place(definition: Path, cwd: Path) -> tuple[Path, Path | None]:
    """(where the lock goes, where a copy of the definition goes, if one is needed): next
    to the definition, unless it is one of gpujob's own, then in `cwd/images/`."""
    if definition.parent.resolve() != builtin_images_dir().resolve():
        return definition.with_suffix(".lock"), None
    folder = cwd / "images"
    return folder / definition.with_suffix(".lock").name, folder / definition.name


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_lock(name: str, images: Path | None = None) -> tuple[Path, Lock]:
    path = definition_path(name, images).with_suffix(".lock")
    if not path.is_file():
        raise UsageError(f"{path}: no lock for image `{name}`", f"run: gpujob image lock {name}")
    return path, parse_lock(path.read_text(), str(path))


def current_lock(name: str, images: Path | None = None) -> tuple[Path, Lock]:
    """The lock, refused when its definition changed since it was made."""
    images = images_folder(name, images)
    path, lock = read_lock(name, images)
    definition = read_definition(name, images)
    if lock.definition_sha256 != hashlib.sha256(definition.text.encode()).hexdigest():
        raise UsageError(
            f"{path}: the lock is older than {definition.path}",
            f"run: gpujob image lock {name}",
        )
    return path, lock


def build_image(
    name: str,
    push: str | None,
    dry_run: bool,
    report: Callable[[str], None],
    no_cache: bool = False,
    images: Path | None = None,
) -> BuildPlan:
    """Plan the build from the checked-in lock; unless dry_run, carry it out."""
    images = images_folder(name, images)
    path, lock = current_lock(name, images)
    if not dry_run:
        wheelhouse.require_known_hashes(lock, str(path))
    plan = plan_build(lock, catalog_for(images), push)
    if not dry_run:
        from launcher.images.docker_build import apply

        apply(plan, lock, images_cache_dir(), report, no_cache=no_cache)
    return plan
