"""`gpujob cost`: hours and dollars per job and per rented host, idle time apart."""

from __future__ import annotations

import click

HOST_COLUMNS = ("host", "gpu", "$/hour", "up h", "busy h", "idle h", "cost", "idle cost", "live")


@click.command()
@click.option("--since", metavar="DURATION", help="Only the last DURATION (`7d`, `12h`, `90m`).")
@click.option("--json", "as_json", is_flag=True, help="Jobs, hosts and totals as JSON.")
def cost(since: str | None, as_json: bool) -> None:
    """What jobs and rented hosts cost: hours and dollars from the price each host was rented
    at and the times the state db recorded. A host's idle time is its time up with no job
    running on it (rented, billed, unused). Jobs on hosts with no price (this machine, your
    SSH hosts) have hours and no dollars."""
    from launcher.cli.textout import table
    from launcher.commands.cost import cost as recorded
    from launcher.commands.cost import table_rows, total_line

    found = recorded(since)
    if as_json:
        import json

        click.echo(json.dumps(found.as_json(), indent=2))
        return
    jobs, hosts = table_rows(found)
    if jobs:
        click.echo(table(jobs, ("job", "state", "hosts", "hours", "cost")) + "\n")
    if hosts:
        click.echo(table(hosts, HOST_COLUMNS) + "\n")
    click.echo(total_line(found, since))
