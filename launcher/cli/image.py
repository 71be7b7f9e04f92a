"""`gpujob image ...`: pinned-wheel images (lock, build, push, CI workflow, catalog).

Click only at import; each command imports launcher.images inside, so `gpujob --help` stays
fast.
"""

from __future__ import annotations

import click


@click.group()
def image() -> None:
    """Pinned-wheel images: resolve pins to a lock, build and push from it."""


@image.command("lock")
@click.argument("name")
@click.option("--offline", is_flag=True, help="Read only local indexes (file://, find-links).")
def lock(name: str, offline: bool) -> None:
    """Resolve images/NAME.yaml into images/NAME.lock (exact wheels and their sha256); a
    definition shipped with gpujob is locked into ./images/, beside a copy of it."""
    from launcher.images.commands import write_lock

    path, done = write_lock(name, offline=offline, report=lambda line: click.echo(line, err=True))
    unknown = len(done.unknown_hashes)
    click.echo(f"wrote {path}: {len(done.packages)} wheels, lock {done.lock_hash[:12]}")
    if unknown:
        click.echo(f"{unknown} sha256 unknown here (see `notes`); build refuses it", err=True)


@image.command("build")
@click.argument("name")
@click.option("--push", "registry", metavar="REGISTRY", help="Push to REGISTRY (host:port).")
@click.option("--dry-run", is_flag=True, help="Print the Dockerfile, wheels and steps only.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: the plan as JSON.")
@click.option("--no-cache", is_flag=True, help="Build every layer again.")
def build(name: str, registry: str | None, dry_run: bool, as_json: bool, no_cache: bool) -> None:
    """Build images/NAME.lock into an image (offline, hash-checked); optionally push it."""
    from launcher.errors import UsageError
    from launcher.images.commands import build_image

    if as_json and not dry_run:
        raise UsageError("--json goes with --dry-run (the plan as JSON)",
                         "add --dry-run, or leave --json out")  # fmt: skip

    def report(line: str) -> None:
        click.echo(f"image: {line}", err=True)

    plan = build_image(name, registry, dry_run, report, no_cache=no_cache)
    if dry_run and as_json:
        import json

        click.echo(json.dumps(plan.as_dict(), indent=2))
    elif dry_run:
        click.echo(f"# would build {plan.tag}" + (f" and push {plan.push}" if plan.push else ""))
        for step in plan.steps:
            click.echo(f"# - {step}")
        click.echo("# Dockerfile:")
        click.echo(plan.dockerfile, nl=False)
    else:
        click.echo(plan.push or plan.tag)


@image.command("ci")
@click.option("--dry-run", is_flag=True, help="Print the workflow instead of writing it.")
def ci(dry_run: bool) -> None:
    """Write .github/workflows/images.yml: build and push every images/*.lock on change."""
    from launcher.images.ci import write_workflow

    path, text = write_workflow(dry_run=dry_run)
    click.echo(text if dry_run else f"wrote {path}", nl=not dry_run)


@image.command("refresh-catalog")
@click.option(
    "--index",
    "indexes",
    multiple=True,
    metavar="URL",
    help="PyTorch wheel index root (default: https://download.pytorch.org/whl).",
)
def refresh_catalog(indexes: tuple[str, ...]) -> None:
    """Update images/catalog.json from the PyTorch indexes (needs the network)."""
    from launcher.images.refresh import refresh

    for line in refresh(list(indexes)):
        click.echo(line)


@image.command("check-driver")
@click.argument("name")
@click.option("--driver", required=True, help="The host's NVIDIA driver, e.g. 535.104.05.")
def check_driver(name: str, driver: str) -> None:
    """Refuse (exit 2) when the host's driver is too old for the image's CUDA."""
    from launcher.images.catalog import load_catalog
    from launcher.images.commands import read_lock
    from launcher.images.driver import check_driver as check

    _, lock = read_lock(name)
    warning = check(name, lock.cuda, driver, load_catalog())
    click.echo(warning or f"driver {driver} runs {name} ({lock.cuda})")
