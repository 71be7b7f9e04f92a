"""gpujob's commands: parse, call one function, print. One catch site for user errors.

Only click is imported at start-up; everything else is imported inside the command that needs
it, so `gpujob --help` and `gpujob status` answer in a few times a bare `python -c pass`.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from launcher.errors import ExitCode, GpujobError

SET_HELP = "Override a spec field, e.g. --set run.nproc_per_node=4 or --set profile=gpu."


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks (for bug reports).")
@click.version_option(package_name="gpujob")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Run ML training jobs from a YAML spec on this machine or on rented GPU hosts.

    \b
    Start here:  gpujob submit jobs/quickstart.yaml
    See the plan: gpujob submit jobs/quickstart.yaml --dry-run
    """
    ctx.obj = {"debug": debug}


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--dry-run", is_flag=True, help="Print every file and command; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: the plan as JSON.")
@click.option("--detach", "-d", is_flag=True, help="Start the job and return its id.")
@click.option("--job-id", help="Use this job id instead of a new one.")
@click.option(
    "--on", multiple=True, metavar="HOST[,HOST]",
    help="SSH host(s): hosts.yaml name or user@addr[:port]; one per node, node 0 first.",
)  # fmt: skip
@click.option("--up", metavar="GPU[:N]", help="Rent one host per node first, e.g. a100.")
@click.option("--provider", type=click.Choice(["lambda", "vast"]), default="lambda",
              show_default=True, help="With --up: which cloud.")  # fmt: skip
@click.option("--runtime", type=click.Choice(["auto", "docker", "bare"]), default="auto",
              show_default=True, help="auto: docker where the host has it.")  # fmt: skip
@click.option("--allow-cpu", is_flag=True, help="With --up: accept hosts without a GPU (lab).")
def submit(**kwargs: Any) -> None:
    """Run the job in SPEC (a job YAML) and stream its log; exits with the job's exit code."""
    from launcher.jobs import SubmitOptions
    from launcher.jobs import submit as run_submit

    sys.exit(run_submit(SubmitOptions(spec_path=kwargs.pop("spec"), **kwargs)))


@cli.command()
@click.argument("job")
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until the job ends.")
@click.option("--node", type=int, help="Only this node's log (multi-node jobs).")
@click.option("--tail", type=click.IntRange(min=0), help="Start with the last N lines.")
def logs(job: str, follow: bool, node: int | None, tail: int | None) -> None:
    """Print a job's log (JOB: id, id prefix, or name for the newest of that name)."""
    from launcher.joblogs import logs as show_logs

    sys.exit(show_logs(job, follow=follow, node=node, tail=tail))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--limit", default=20, show_default=True, help="How many jobs, newest first.")
def status(as_json: bool, limit: int) -> None:
    """Show rented hosts (price, uptime, cost so far) and jobs (state, each node's state,
    runtime, exit code, last line). --json: {"hosts": [...], "jobs": [...]}."""
    from launcher.jobstatus import for_table, status_rows
    from launcher.state.hosts import host_rows
    from launcher.textout import table

    rows, hosts = status_rows(limit), host_rows()
    if as_json:
        import json

        click.echo(json.dumps({"hosts": hosts, "jobs": rows}, indent=2))
        return
    if hosts:
        columns = ("name", "provider", "gpu", "status", "address", "price_per_hour",
                   "uptime_h", "cost_so_far")  # fmt: skip
        click.echo(table(hosts, columns) + "\n")
    if not rows:
        click.echo("no jobs yet; try: gpujob submit jobs/quickstart.yaml")
        return
    columns = ("id", "state", "exit_code", "nodes", "provider", "runtime_s", "warning", "last_line")
    click.echo(table(for_table(rows), columns))


@cli.command()
@click.argument("job")
@click.option("--grace", default=30.0, show_default=True, help="Seconds between TERM and KILL.")
@click.option("--dry-run", is_flag=True, help="Print the commands; change nothing.")
def cancel(job: str, grace: float, dry_run: bool) -> None:
    """Stop every node of a job: SIGTERM, then SIGKILL after the grace period."""
    from launcher.jobstatus import cancel as run_cancel

    sys.exit(run_cancel(job, grace, dry_run))


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("host")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(host: str, command: tuple[str, ...]) -> None:
    """Run COMMAND on HOST (gpujob ssh HOST -- CMD ...), or log in when no COMMAND is given.

    HOST is a hosts.yaml name or user@addr[:port]; its key is pinned like `submit --on`'s.
    """
    from launcher.hostshell import ssh_command

    sys.exit(ssh_command(host, list(command)))


@cli.command()
@click.argument("host")
@click.option("--python", metavar="PATH", help="The Python that runs jobs there (default python3).")
@click.option("--json", "as_json", is_flag=True, help="The verdicts as JSON.")
def doctor(host: str, python: str | None, as_json: bool) -> None:
    """Check HOST (`local`, a hosts.yaml name, a rented host, user@addr): GPUs, torch and CUDA,
    a matmul per GPU, an all-reduce across them, heavy imports timed, disk, shm, memory."""
    from launcher.doctor import run_doctor

    sys.exit(run_doctor(host, python, as_json))


@cli.command()
def schema() -> None:
    """Print the job spec's JSON Schema (for editor completion)."""
    import json

    from launcher.spec.job import JobSpec

    click.echo(json.dumps(JobSpec.model_json_schema(), indent=2))


@cli.group()
def lab() -> None:
    """A GPU cloud on this machine made of real parts, for demos and tests (needs root)."""


@lab.command("up")
@click.option("--hosts", default=2, show_default=True, help="Static SSH hosts to start.")
@click.option("--dry-run", is_flag=True, help="Print what would be started; change nothing.")
def lab_up(hosts: int, dry_run: bool) -> None:
    """Start the lab: bridge, hosts with sshd, registry, S3, Lambda and Vast API fakes."""
    from infra.lab import up

    up(hosts=hosts, dry_run=dry_run, report=lambda text: click.echo(f"lab: {text}", err=True))
    if not dry_run:
        click.echo('lab is up; point gpujob at it with:  eval "$(gpujob lab env)"', err=True)


@lab.command("down")
@click.option("--dry-run", is_flag=True, help="Print what would be removed; change nothing.")
def lab_down(dry_run: bool) -> None:
    """Stop the lab and remove every namespace, veth, daemon and container it made."""
    from infra.lab import down

    down(dry_run=dry_run, report=lambda text: click.echo(f"lab: {text}", err=True))


@lab.command("env")
def lab_env() -> None:
    """Print `export` lines that point gpujob at the running lab."""
    import shlex

    from infra.lab import env_vars

    for key, value in env_vars().items():
        click.echo(f"export {key}={shlex.quote(value)}")


@cli.command()
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
@click.option("--max-price", type=float, help="Highest $/hour per host.")
@click.option("--region", help="Lambda region (us-east-1) or Vast country code (US).")
@click.option("--disk", default=0, type=click.IntRange(min=0), help="Least disk, GB.")
@click.option("--yes", "-y", is_flag=True, help="Launch without asking.")
@click.option("--dry-run", is_flag=True, help="Show the offers; launch nothing.")
@click.option(
    "--timeout",
    default=1200.0,
    show_default=True,
    help="Seconds to wait for SSH before giving up (and terminating).",
)
@click.option("--filesystem", metavar="NAME", help="Lambda: attach this persistent filesystem.")
@click.option("--allow-cpu", is_flag=True, help="Accept hosts without an NVIDIA GPU (lab, demos).")
@click.option("--image", help="Job image to have on the host (pulled if missing).")
@click.option("--json", "as_json", is_flag=True, help="With --host: the checks as JSON.")
@click.option(
    "--bootstrap/--no-bootstrap",
    default=True,
    show_default=True,
    help="Check and fix the host after SSH answers.",
)
def up(host: str | None, as_json: bool, **kwargs: Any) -> None:
    """Rent GPU hosts (GPU: a100, h100:8, a100-80gb:2), wait for SSH, and make them ready:
    GPU and driver, Docker, disk and /dev/shm, the agent, rclone, the job image."""
    from launcher.errors import UsageError
    from launcher.hosts_cmd import UpOptions, up_static
    from launcher.hosts_cmd import up as run_up

    if host is not None:
        sys.exit(up_static(host, UpOptions(gpu=kwargs.pop("gpu") or "", **kwargs), as_json))
    if not kwargs["gpu"]:
        raise UsageError("name a GPU (a100, h100:8) or a machine with --host", "gpujob up --help")
    sys.exit(run_up(UpOptions(**kwargs)))


@cli.command()
@click.argument("host", required=False)
@click.option("--all", "everything", is_flag=True, help="Every gpujob host on every cloud.")
@click.option("--dry-run", is_flag=True, help="Show what would be terminated.")
def down(host: str | None, everything: bool, dry_run: bool) -> None:
    """Terminate a host gpujob rented (HOST: name or instance id), or --all of them."""
    from launcher.hosts_cmd import down as run_down

    sys.exit(run_down(host, everything, dry_run))


from launcher.storage_cmd import storage, sync_ckpt  # noqa: E402 - click only

cli.add_command(storage)
cli.add_command(sync_ckpt)

from launcher.image_cmd import image  # noqa: E402 - click only

cli.add_command(image)


def run(args: list[str]) -> None:
    """Run one command line (without the program name); exits with its code."""
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="gpujob", standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.ClickException as err:
        err.show()
        sys.exit(ExitCode.USAGE)
    except click.exceptions.Abort:
        click.echo("gpujob: aborted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except GpujobError as err:
        if debug:
            raise
        click.echo(f"gpujob: error: {err.one_line()}", err=True)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        click.echo("gpujob: interrupted", err=True)
        sys.exit(ExitCode.INTERRUPTED)

