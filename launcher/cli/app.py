"""The `gpujob` group: its global options and every command, registered from the modules
that define them (one per command group). Only click is imported at start-up."""

from __future__ import annotations

import click

from launcher.cli.hosts import doctor, down, ssh, up
from launcher.cli.image import image
from launcher.cli.jobs import cancel, logs, recover, schema, status, submit
from launcher.cli.lab import lab
from launcher.cli.project import completion, init
from launcher.cli.storage import storage, sync_ckpt


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks (for bug reports).")
@click.version_option(package_name="gpujob")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Run ML training jobs from a YAML spec on this machine or on rented GPU hosts.

    \b
    Start here:   gpujob init quickstart   (writes quickstart.yaml and its train.py here)
    See the plan: gpujob submit quickstart.yaml --dry-run
    Run it:       gpujob submit quickstart.yaml
    """
    ctx.obj = {"debug": debug}


for command in (submit, logs, status, cancel, recover, up, down, ssh, doctor, sync_ckpt, storage,
                image, schema, lab, init, completion):  # fmt: skip
    cli.add_command(command)
