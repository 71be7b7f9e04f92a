"""`gpujob image ci`: the GitHub Actions workflow that builds images/ in CI. It calls
`gpujob image build` for each image (no build logic in YAML), so CI and a laptop build the
same thing; credentials come from repository secrets, through the environment."""

from __future__ import annotations

from pathlib import Path

from launcher.images.buildplan import template_environment
from launcher.images.lock import Lock, parse_lock
from launcher.resources import builtin_images_dir

WORKFLOW = Path(".github") / "workflows" / "images.yml"


def render_workflow(
    locks: list[Lock], lab_only: set[str], branch: str = "main", watch: str = "images"
) -> str:
    """Pure: the workflow text for these locks. A lock with unknown hashes, or on a base only
    the lab has, is listed in a comment rather than built (it would fail by design)."""
    images, skipped = [], []
    for lock in sorted(locks, key=lambda item: item.name):
        if lock.unknown_hashes:
            skipped.append((lock.name, f"{len(lock.unknown_hashes)} sha256 unknown in its lock"))
        elif lock.base in lab_only:
            skipped.append((lock.name, f"base {lock.base} exists only in the lab"))
        else:
            images.append(lock.name)
    template = template_environment().get_template("images.yml.j2")
    return template.render(images=images, skipped=skipped, branch=branch, watch=watch)


def write_workflow(
    images: Path | None = None, root: Path | None = None, dry_run: bool = False
) -> tuple[Path, str]:
    """The workflow for the locks in `images` (the current folder's own `images/`, else the
    shipped ones), written under `root` (the current folder)."""
    from launcher.images.commands import catalog_for
    from launcher.resources import user_images_dir

    images = images or user_images_dir(Path.cwd()) or builtin_images_dir()
    catalog = catalog_for(images)
    lab_only = {e["match"] for e in catalog.data["base_images"] if e.get("lab_only")}
    locks = [parse_lock(p.read_text(), str(p)) for p in sorted(images.glob("*.lock"))]
    root = (root or Path.cwd()).resolve()
    # CI builds on a change to the definitions, wherever they are in the repository.
    watch = (
        images.resolve().relative_to(root).as_posix()
        if images.resolve().is_relative_to(root)
        else "images"
    )
    text = render_workflow(locks, lab_only, watch=watch)
    path = root / WORKFLOW
    if not dry_run:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path, text
