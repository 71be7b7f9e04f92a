"""`gpujob up`, `down`, `ssh` and `doctor`: hosts rented, hosts you have, and their checks."""

from __future__ import annotations

import sys
from typing import Any

import click


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("host", metavar="HOST|JOB")
@click.option("--node", type=click.IntRange(min=0), help="JOB's node (0 first; default 0).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND]")
def ssh(host: str, node: int | None, command: tuple[str, ...]) -> None:
    """Run COMMAND on HOST as `ssh HOST COMMAND` would, or log in when none is given.

    \b
      gpujob ssh HOST -- 'echo a; echo b'    the remote login shell runs it
      gpujob ssh HOST -- echo a b            runs `echo a b`
      echo x | gpujob ssh HOST -- cat        stdin goes to the command

    As with OpenSSH, the words after `--` are joined with single spaces into one command
    line that the remote shell interprets: quotes, `;`, pipes, `$HOME` and globs act there.
    It is not quoted: quote what must reach the host as one word (`-- "ls 'my dir'"`).

    stdin goes to the command, its stdout and stderr come back as they are written, and
    the exit code is the command's, or 255 when ssh itself failed (with gpujob's one-line
    error). As with `ssh HOST COMMAND`, no terminal is allocated for a command.

    HOST is a hosts.yaml name, a host `gpujob up` rented, or user@addr[:port]; its key is
    pinned on first contact and checked strictly from then on, and the command runs on the
    host's master connection, as every gpujob command does.

    JOB (a job id, id prefix or name) is its node's host, in the node's folder (job.log,
    kept/ after a --keep-on-failure): on any target; this machine's job gets a shell here,
    a cluster's its login host. A host's name wins over a job's; --node says a job.
    """
    from launcher.commands.ssh import ssh_command

    sys.exit(ssh_command(host, list(command), node))


@click.command()
@click.argument("host")
@click.option("--python", metavar="PATH", help="The Python that runs jobs there (default python3).")
@click.option("--json", "as_json", is_flag=True, help="The verdicts as JSON.")
def doctor(host: str, python: str | None, as_json: bool) -> None:
    """Check HOST (`local`, a hosts.yaml name, a rented host, user@addr): GPUs, torch and CUDA,
    a matmul per GPU, an all-reduce across them, heavy imports timed, disk, shm, memory."""
    from launcher.doctor import run_doctor

    sys.exit(run_doctor(host, python, as_json))


@click.command()
@click.argument("gpu", required=False)
@click.option(
    "--host",
    metavar="HOST",
    help="Make a machine you have ready instead (hosts.yaml name or user@addr[:port]).",
)
@click.option(
    "--provider",
    type=click.Choice(["lambda", "vast"]),
    default="lambda",
    show_default=True,
    help="Which cloud rents the host.",
)
@click.option(
    "--count",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Hosts to launch, in parallel.",
)
@click.option("--one-network", is_flag=True,
              help="Vast: the --count hosts rent in one physical cluster, joined to one overlay "
              "network (as submit --up does for a job of several nodes).")  # fmt: skip
@click.option("--max-price", type=click.FloatRange(min=0, min_open=True),
              help="Highest $/hour per host.")  # fmt: skip
@click.option(
    "--max-cost", type=click.FloatRange(min=0), metavar="DOLLARS",
    help="Refuse a rental whose price over its autostop window passes this (default: "
    "budget.max_cost in the user config).",
)  # fmt: skip
@click.option("--region", help="Lambda region (us-east-1) or Vast country code (US).")
@click.option("--disk", default=0, type=click.IntRange(min=0), help="Least disk, GB.")
@click.option(
    "--spot", is_flag=True,
    help="Vast: an interruptible host at a bid (the offer's min_bid; --max-price caps the "
    "price); stopped when outbid.",
)  # fmt: skip
@click.option("--yes", "-y", is_flag=True, help="Launch without asking.")
@click.option("--dry-run", is_flag=True, help="Show the offers; launch nothing.")
@click.option(
    "--timeout",
    default=1200.0,
    show_default=True,
    help="Seconds to wait for SSH before giving up (and terminating).",
)
@click.option(
    "--filesystem",
    metavar="NAME",
    help="Lambda: attach this persistent filesystem (--yes creates a missing one).",
)
@click.option("--allow-cpu", is_flag=True, help="Accept hosts without an NVIDIA GPU (lab, demos).")
@click.option("--image", help="Job image to have on the host (pulled if missing).")
@click.option("--json", "as_json", is_flag=True, help="With --host: the checks as JSON.")
@click.option(
    "--autostop", metavar="DURATION",
    help="The host ends itself after this long (30m, 2h, 90s) with no gpujob job running and "
    "no SSH session; it runs on the host, also when this machine is off.",
)  # fmt: skip
@click.option("--autostop-stop", is_flag=True,
              help="With --autostop: stop, not terminate, where the cloud can (Vast).")  # fmt: skip
@click.option(
    "--autostop-key-on-host", is_flag=True,
    help="With --autostop on Lambda: allow your API key on the host (a 0600 file), which "
    "Lambda needs for the host to end itself.",
)  # fmt: skip
@click.option(
    "--bootstrap/--no-bootstrap",
    default=True,
    show_default=True,
    help="Check and fix the host after SSH answers.",
)
def up(host: str | None, as_json: bool, **kwargs: Any) -> None:
    """Rent GPU hosts (GPU: a100, h100:8, a100-80gb:2), wait for SSH, and make them ready:
    GPU and driver, Docker, disk and /dev/shm, the agent, rclone, the job image."""
    from launcher.commands.up import up as run_up
    from launcher.commands.up import up_static
    from launcher.errors import UsageError
    from launcher.targets.cloud.autostop import window_seconds
    from launcher.targets.cloud.hosts import UpOptions

    kwargs["autostop_s"] = window_seconds(kwargs.pop("autostop"))
    if as_json and host is None:
        raise UsageError("--json goes with --host (the checks as JSON)",
                         "add --host, or leave --json out")  # fmt: skip
    if host is not None:
        sys.exit(up_static(host, UpOptions(gpu=kwargs.pop("gpu") or "", **kwargs), as_json))
    if not kwargs["gpu"]:
        raise UsageError("name a GPU (a100, h100:8) or a machine with --host", "gpujob up --help")
    from launcher.cli.jobs import provider_for

    kwargs["provider"] = provider_for(kwargs["gpu"], kwargs["provider"])
    sys.exit(run_up(UpOptions(**kwargs)))


@click.command()
@click.argument("host", required=False)
@click.option("--all", "everything", is_flag=True, help="Every host of ours on every cloud.")
@click.option("--dry-run", is_flag=True, help="Show what would be terminated.")
@click.option(
    "--force",
    is_flag=True,
    help="Terminate HOST even when another owner's gpujob launched it (their jobs are "
    "neither cancelled nor synced).",
)
def down(host: str | None, everything: bool, dry_run: bool, force: bool) -> None:
    """Terminate a host gpujob rented (HOST: name or instance id), or --all of ours.

    Only instances this state launched are ours; another owner's gpujob instances on the
    same account are listed and left alone, and naming one takes --force."""
    from launcher.commands.down import down as run_down

    sys.exit(run_down(host, everything, dry_run, force=force))
