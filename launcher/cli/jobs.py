"""`gpujob submit`, `logs`, `status`, `cancel` and `schema`: parse, call one function in
`launcher.commands`, print. Only click is imported here; the rest inside each command."""

from __future__ import annotations

import sys
from typing import Any

import click

SET_HELP = "Override a spec field, e.g. --set run.nproc_per_node=4 or --set profile=gpu."


class _SubmitCommand(click.Command):
    """`submit --up task.yaml`: `--up` takes an optional GPU, and click takes whatever
    follows it; a job file there is the SPEC, with `--up` alone (the spec's GPU)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        for at, arg in enumerate(args[:-1]):
            if arg == "--":
                break
            if arg == "--up" and _is_job_file(args[at + 1]):
                args[at] = "--up=spec"
                break
        return super().parse_args(ctx, args)


def _is_job_file(arg: str) -> bool:
    """A YAML file's name, or a file that exists: never a GPU (`a100`, `h100:8`)."""
    import os

    return arg.lower().endswith((".yaml", ".yml")) or os.path.isfile(arg)


@click.command(cls=_SubmitCommand)
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help=SET_HELP)
@click.option("--dry-run", is_flag=True, help="Print every file and command; change nothing.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="With --dry-run: the plan as JSON; with --detach: the job's record as JSON.",
)
@click.option("--detach", "-d", is_flag=True, help="Start the job and return its id.")
@click.option("--job-id", help="Use this job id instead of a new one.")
@click.option(
    "--on", multiple=True, metavar="HOST[,HOST]",
    help="SSH host(s): hosts.yaml name or user@addr[:port]; one per node, node 0 first. "
    "Or slurm:NAME[/PARTITION]: queue it on a hosts.yaml `type: slurm` cluster.",
)  # fmt: skip
@click.option("--up", metavar="[GPU[:N]]", is_flag=False, flag_value="spec",
              help="Rent one host per node first, e.g. a100; alone: the spec's GPU, the "
              "cheapest offer of its candidates (any_of) or the first one offered (ordered), "
              "across the clouds unless --provider names one.")  # fmt: skip
@click.option("--provider", type=click.Choice(["lambda", "vast"]), default="lambda",
              show_default=True, help="With --up: which cloud.")  # fmt: skip
@click.option("--runtime", type=click.Choice(["auto", "docker", "bare"]), default="auto",
              show_default=True, help="auto: docker where the host has it.")  # fmt: skip
@click.option("--allow-cpu", is_flag=True, help="With --up: accept hosts without a GPU (lab).")
@click.option(
    "--disk",
    default=0,
    type=click.IntRange(min=0),
    help="With --up: least disk per host, GB (the disk budget is checked against it).",
)
@click.option("--max-price", type=click.FloatRange(min=0, min_open=True),
              help="With --up: highest $/hour per host.")  # fmt: skip
@click.option(
    "--max-cost", type=click.FloatRange(min=0), metavar="DOLLARS",
    help="With --up: refuse a rental whose price over max_duration + autostop passes this "
    "(default: budget.max_cost in the user config).",
)  # fmt: skip
@click.option("--autostop-key-on-host", is_flag=True,
              help="With --up on Lambda and resources.autostop: allow your API key on the "
              "hosts (a 0600 file), which Lambda needs for a host to end itself.")  # fmt: skip
@click.option("--keep-on-failure", metavar="DURATION",
              help="With --up: when the job fails, keep its hosts up this long (30m, 2h) for "
              "a look (`gpujob ssh JOB`), then they end themselves; `gpujob down JOB` ends "
              "them sooner.")  # fmt: skip
@click.option("--yes", "-y", is_flag=True,
              help="With --up: create the spec's resources.filesystem (Lambda) if you have "
              "none of that name; it outlives the hosts and bills.")  # fmt: skip
@click.option("--recover", is_flag=True,
              help="With --up: restart the job on fresh hosts when a host is lost (the "
              "spec's `recovery:`, or its defaults); needs checkpoints.sync_to.")  # fmt: skip
@click.option("--resume-from", "resume_path", metavar="REMOTE:PREFIX/RUN[/checkpoint-N]",
              help="Start from this checkpoint in S3 (a run's newest when none is named): "
              "pulled onto node 0, verified, named by GPUJOB_RESUME_FROM.")  # fmt: skip
@click.option("--env", "envs", multiple=True, metavar="NAME[=VALUE]",
              help="A variable for the job (SkyPilot's --env); NAME alone: from your "
              "environment. A name the task marks `null` or lists under `secrets:` stays a "
              "secret (masked, never stored).")  # fmt: skip
@click.option("--env-file", "env_files", multiple=True, metavar="FILE",
              help="Variables from a dotenv file (NAME=VALUE lines).")  # fmt: skip
@click.option("--secret", "secrets", multiple=True, metavar="NAME[=VALUE]",
              help="A secret for the job (masked everywhere, never in a 0644 file); NAME "
              "alone: from your environment.")  # fmt: skip
@click.option("--ladder", metavar="W,W,..|nodes:N,N,..",
              help="Run the job at each world size (or node count) in turn, --ladder-steps "
              "steps each (or each to its first complete checkpoint), until the first that "
              "fails; a table of what each measured.")  # fmt: skip
@click.option("--ladder-steps", type=click.IntRange(min=1), metavar="N",
              help="With --ladder: steps per rung (GPUJOB_MAX_STEPS, which the job honours); "
              "without it, each rung ends at its first complete checkpoint.")  # fmt: skip
def submit(**kwargs: Any) -> None:
    """Run the job in SPEC (a job YAML) and stream its log; exits with the job's exit code.
    A SkyPilot job group (a header document with `execution: parallel`, then one document per
    task) starts every task together, each its own job, followed as one group."""
    from launcher.commands.submit import SubmitOptions
    from launcher.commands.submit import submit as run_submit

    rungs, steps = kwargs.pop("ladder"), kwargs.pop("ladder_steps")
    _refuse_idle_flags(kwargs)
    _env_flags(kwargs)
    if kwargs["up"] == "spec":  # targets/cloud/candidates.py's FROM_SPEC: chosen there
        given = click.get_current_context().get_parameter_source("provider")
        if given is not click.core.ParameterSource.COMMANDLINE:
            kwargs["provider"] = "any"  # candidates.ANY_CLOUD: every cloud quotes
    elif kwargs["up"]:
        kwargs["provider"] = provider_for(kwargs["up"], kwargs["provider"])
    options = SubmitOptions(spec_path=kwargs.pop("spec"), **kwargs)
    from launcher.spec.job_group import is_group_file

    if is_group_file(options.spec_path):
        from launcher.commands.group_submit import submit_group

        sys.exit(submit_group(options, ladder=rungs is not None or steps is not None))
    if rungs is not None or steps is not None:
        from launcher.commands.ladder import ladder

        sys.exit(ladder(options, rungs, steps))
    sys.exit(run_submit(options))


def _env_flags(kwargs: dict[str, Any]) -> None:
    """--env-file's lines join --env; every VALUE given (--env NAME=VALUE, a file's line,
    --secret NAME=VALUE) goes into spec/env_flags.FLAG_VALUES, private to this process (not
    os.environ: gpujob's own keys stay its own), and the request keeps only names: no value
    in the recovery request, on a later command line, in the job's record or a log."""
    from launcher.spec.env_flags import FLAG_VALUES, env_name, read_env_file

    FLAG_VALUES.clear()  # this command's alone
    items = [item for path in kwargs.pop("env_files") for item in read_env_file(path)]
    lists: dict[str, list[str]] = {"envs": [], "secrets": []}
    for flag, given in (("envs", [*items, *kwargs["envs"]]), ("secrets", kwargs["secrets"])):
        for item in given:
            name, sep, value = item.partition("=")
            env_name(name, "--env" if flag == "envs" else "--secret")
            if sep:
                FLAG_VALUES[name] = value
            if name not in lists[flag]:
                lists[flag].append(name)
    kwargs["envs"], kwargs["secrets"] = tuple(lists["envs"]), tuple(lists["secrets"])


def provider_for(gpu: str, provider: str) -> str:
    """`--up l4` without --provider: the cloud that sells it, said in one line."""
    from launcher.clouds.gpus import serving_provider
    from launcher.say import say

    given = click.get_current_context().get_parameter_source("provider")
    chosen, why = serving_provider(gpu, provider, given is click.core.ParameterSource.COMMANDLINE)
    if why:
        say(why)
    return chosen


WITH_UP = ("provider", "max_price", "disk", "allow_cpu", "yes")
"""submit's flags that only a rental reads (--max-cost and --autostop-key-on-host are
refused without --up where they are used)."""


def _refuse_idle_flags(kwargs: dict[str, Any]) -> None:
    """A flag given that changes nothing in the command as given is refused, not ignored."""
    from launcher.errors import UsageError

    given = click.get_current_context().get_parameter_source
    if not kwargs["up"]:
        for name in WITH_UP:
            if given(name) is click.core.ParameterSource.COMMANDLINE:
                flag = "--" + name.replace("_", "-")
                raise UsageError(f"{flag} goes with --up (what to rent); without it nothing "
                                 "is rented", f"add --up GPU, or leave {flag} out")  # fmt: skip
    if kwargs["as_json"] and not (kwargs["dry_run"] or kwargs["detach"]):
        raise UsageError("--json prints the plan (with --dry-run) or the started job's record "
                         "(with --detach); a followed job's output is its log",
                         "add --dry-run or --detach, or leave --json out")  # fmt: skip


@click.command()
@click.argument("job")
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until the job ends.")
@click.option("--node", type=int, help="Only this node's log (multi-node jobs).")
@click.option("--tail", type=click.IntRange(min=0), help="Start with the last N lines.")
def logs(job: str, follow: bool, node: int | None, tail: int | None) -> None:
    """Print a job's log (JOB: id, id prefix, or name for the newest of that name); a job
    group's id or name: every task's log, each line prefixed by its task."""
    from launcher.commands.logs import logs as show_logs

    sys.exit(show_logs(job, follow=follow, node=node, tail=tail))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--limit", default=20, show_default=True, help="How many jobs, newest first.")
def status(as_json: bool, limit: int) -> None:
    """Show rented hosts (price, uptime, cost so far, the budget each was rented under) and
    jobs (state, each node's state, runtime, exit code, last line). --json: {"hosts": [...],
    "jobs": [...]}; a host past its budget is warned about on stderr."""
    from launcher.cli.textout import table
    from launcher.commands.status import for_table, status_rows
    from launcher.state.hosts import host_rows
    from launcher.targets.cloud.autostop import with_autostop
    from launcher.targets.cloud.cost import budget_warnings

    unverified: set[str] = set()
    if host_rows():  # the hosts db squared with each cloud first (none recorded: no import)
        from launcher.targets.cloud.reconcile import for_status

        unverified = for_status()
    rows, hosts = status_rows(limit), with_autostop(host_rows())
    for host in hosts:
        host["verified"] = host["provider"] not in unverified
    for line in budget_warnings(hosts):
        click.echo(f"gpujob: {line}", err=True)
    if as_json:
        import json

        click.echo(json.dumps({"hosts": hosts, "jobs": rows}, indent=2))
        return
    if hosts:
        columns = ("name", "provider", "gpu", "status", "address", "price_per_hour",
                   "uptime_h", "cost_so_far", "autostop")  # fmt: skip
        shown = [dict(h, autostop=h.get("autostop_text"),
                      status=h["status"] if h["verified"] else f"{h['status']} (unverified)")
                 for h in hosts]  # fmt: skip
        click.echo(table(shown, columns) + "\n")
    if not rows:
        click.echo("no jobs yet; try: gpujob init quickstart && gpujob submit quickstart.yaml")
        return
    columns = ("id", "state", "exit_code", "nodes", "provider", "runtime_s", "warning", "last_line")
    if any(row.get("group") for row in rows):  # a job group's tasks: GROUP/task
        columns = (columns[0], "group", *columns[1:])
    if any(row.get("recovery") for row in rows):
        columns = (*columns[:-1], "recovery", columns[-1])
    if any(row.get("metrics") for row in rows):  # the headline figure, before the warning
        columns = (*columns[:6], "metrics", *columns[6:])
    from launcher.say import shown

    click.echo(shown(table(for_table(rows), columns)))
    from launcher.cli.web import reach_lines

    for line in reach_lines(list(rows)):  # type: ignore[arg-type]
        click.echo(line)


@click.command()
@click.argument("job")
@click.option("--grace", default=30.0, show_default=True, help="Seconds between TERM and KILL.")
@click.option("--dry-run", is_flag=True, help="Print the commands; change nothing.")
def cancel(job: str, grace: float, dry_run: bool) -> None:
    """Stop every node of a job: SIGTERM, then SIGKILL after the grace period. A job
    group's id or name stops every task of the group."""
    from launcher.commands.cancel import cancel as run_cancel

    sys.exit(run_cancel(job, grace, dry_run))


@click.command()
@click.argument("job")
@click.option("--foreground", is_flag=True, hidden=True, help="Be the controller (detached).")
def recover(job: str, foreground: bool) -> None:
    """Start JOB's recovery controller unless one runs (after a reboot, or a kill): it adopts
    the job where it is, a running job goes on running."""
    from launcher.commands.recover import recover as run_recover

    sys.exit(run_recover(job, foreground=foreground))


@click.command()
def schema() -> None:
    """Print the job spec's JSON Schema (for editor completion)."""
    import json

    from launcher.spec.job import JobSpec

    click.echo(json.dumps(JobSpec.model_json_schema(), indent=2))
