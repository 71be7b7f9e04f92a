"""What ships inside the package and is read at run time: the Jinja templates, the built-in
image definitions with their locks, and the wheel catalog. Found through
`importlib.resources`, so an installed wheel works from any folder, not only a checkout.

A user's own `images/` folder wins where it has the definition asked for: the nearest at
or above the job spec's folder (or the current folder, for `gpujob image ...`).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any


def builtin_images_dir() -> Path:
    """Image definitions (`NAME.yaml`), their locks and `catalog.json`, as shipped."""
    return Path(str(files("launcher.images") / "definitions"))


def catalog_file() -> Path:
    return builtin_images_dir() / "catalog.json"


def user_images_dir(start: Path) -> Path | None:
    """The nearest `images/` folder at or above `start`."""
    for folder in (start, *start.parents):
        if (folder / "images").is_dir():
            return folder / "images"
    return None


def images_dir_for(name: str, start: Path) -> Path:
    """Where definition `name` lives: the user's `images/` if it holds it, else built in."""
    own = user_images_dir(start.resolve())
    if own is not None and ((own / f"{name}.yaml").is_file() or (own / f"{name}.lock").is_file()):
        return own
    return builtin_images_dir()


LAYOUT = {"trim_blocks": True, "lstrip_blocks": True, "keep_trailing_newline": True}
"""Block tags leave no blank lines behind; a rendered file ends with its newline."""


def template_environment(finalize: Callable[[Any], Any] | None = None) -> Any:
    """Jinja over the shipped templates: StrictUndefined (a missing value is an error, never
    an empty string), no HTML autoescape (none of them is HTML: the shell template quotes
    through `finalize`, the others render values gpujob checked)."""
    import jinja2

    loader = jinja2.PackageLoader("launcher", "templates")
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                              finalize=finalize, autoescape=False, **LAYOUT)  # fmt: skip
