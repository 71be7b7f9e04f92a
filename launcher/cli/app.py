"""The `gpujob` group: its global options and every command, registered from the modules
that define them (one per command group). Only click is imported at start-up."""

from __future__ import annotations

import click

from launcher.cli.cost import cost
from launcher.cli.hosts import doctor, down, ssh, up
from launcher.cli.image import image
from launcher.cli.jobs import cancel, logs, recover, schema, status, submit
from launcher.cli.lab import lab
from launcher.cli.metrics import metrics
from launcher.cli.project import completion, init
from launcher.cli.replay import replay
from launcher.cli.storage import storage, sync_ckpt
from launcher.cli.web import port_forward, tb


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks (for bug reports).")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=lambda ctx, _, asked: _version(ctx, asked),
              help="Show the version and exit.")  # fmt: skip
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Run ML training jobs from a YAML spec on this machine or on rented GPU hosts.

    \b
    Start here:   gpujob init quickstart   (writes quickstart.yaml and its train.py here)
    See the plan: gpujob submit quickstart.yaml --dry-run
    Run it:       gpujob submit quickstart.yaml
    """
    ctx.obj = {"debug": debug}


def _version(ctx: click.Context, asked: bool) -> None:
    """The installed package's version, from its metadata (read only when asked); a source
    tree run without installing (`python -m launcher`, as on the GPU machines) says so
    instead of failing."""
    if not asked or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("gpujob")
    except PackageNotFoundError:
        found = "(not installed: run from a source tree)"
    click.echo(f"gpujob, version {found}")
    ctx.exit()


for command in (submit, logs, status, cancel, recover, up, down, ssh, doctor, sync_ckpt, storage,
                image, schema, lab, init, completion, port_forward, tb, cost, replay,
                metrics):  # fmt: skip
    cli.add_command(command)
