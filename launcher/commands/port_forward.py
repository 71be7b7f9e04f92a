"""`gpujob port-forward JOB [PORT[:LOCAL]...] [--node K]`: a port of a job's node on this
machine's loopback, over the job's SSH connection, until Ctrl-C. Without PORT, every port
the job's spec serves (`ports:`, SkyPilot's `resources.ports`)."""

from __future__ import annotations

from launcher.errors import UsageError
from launcher.jobs.forwarding import Show, forward_job
from launcher.jobs.records import job_and_target
from launcher.jobs.served import public_lines
from launcher.say import say
from launcher.spec.web import port_number
from launcher.state.db import StateDB
from launcher.state.served import ServedDB

FIX = "write PORT or PORT:LOCAL, e.g. 8080 or 8080:18080"


def parse_forward(text: str) -> tuple[int, int]:
    """`PORT[:LOCAL]` as (PORT, LOCAL); LOCAL is PORT when not given."""
    remote, colon, local = text.partition(":")
    try:
        port = port_number(remote, "PORT")
        return port, port_number(local, "LOCAL") if colon else port
    except ValueError as err:
        raise UsageError(f"{text!r}: {err}", FIX) from None


def port_forward(reference: str, forwards: tuple[str, ...], node: int, show: Show) -> int:
    pairs = [parse_forward(text) for text in forwards]
    job, target = job_and_target(StateDB(), reference)
    served = ServedDB().get(job.id)
    if not pairs:
        if served is None or not served.ports:
            raise UsageError(f"job {job.id} records no ports",
                             f"name one: gpujob port-forward {job.id} PORT[:LOCAL], or add "
                             "`ports:` to the job's spec")  # fmt: skip
        pairs = [(port, port) for port in served.ports]
    for line in public_lines(served, [port for port, _ in pairs]) if served else []:
        show(line)  # reachable without this command too: its cloud publishes it
    if job.terminal:
        say(f"warning: job {job.id} has ended ({job.state}): what it served may be gone")
    return forward_job(job, target, pairs, node, show)
