"""`gpujob port-forward` and `gpujob tb`: what a job serves, reached from this machine. Only
click is imported here; the rest inside each command."""

from __future__ import annotations

import sys

import click


def _show(line: str) -> None:
    click.echo(line)


@click.command("port-forward")
@click.argument("job")
@click.argument("ports", nargs=-1, metavar="[PORT[:LOCAL]]...")
@click.option("--node", default=0, show_default=True, type=click.IntRange(min=0),
              help="Which node's port (multi-node jobs).")  # fmt: skip
def port_forward(job: str, ports: tuple[str, ...], node: int) -> None:
    """Forward a port of JOB's node to 127.0.0.1:LOCAL (LOCAL: PORT when not given) over the
    job's SSH connection, until Ctrl-C. Without PORT: every port of the spec's `ports:`."""
    from launcher.commands.port_forward import port_forward as run_forward

    sys.exit(run_forward(job, ports, node, _show))


@click.command("tb")
@click.argument("job")
@click.option("--logdir", metavar="DIR",
              help="The event files' folder, relative to the job's workdir (default: the "
              "spec's tensorboard.logdir).")  # fmt: skip
@click.option("--port", type=click.IntRange(1, 65535), metavar="LOCAL",
              help="The port here (default 6006, or a free one).")  # fmt: skip
def tb(job: str, logdir: str | None, port: int | None) -> None:
    """Start TensorBoard beside JOB on its head node (unless it runs there; it stops when the
    job ends) and forward it here, until Ctrl-C."""
    from launcher.commands.tensorboard import tensorboard

    sys.exit(tensorboard(job, logdir, port, _show))


def reach_lines(rows: list[dict[str, object]]) -> list[str]:
    """How to reach what the running jobs of `status`'s rows serve (printed under its table)."""
    if not any(row["state"] == "running" for row in rows):
        return []  # nothing to read or import: a long history of ended jobs
    from launcher.jobs.served import reach_lines as lines_of
    from launcher.state.served import ServedDB

    served = ServedDB().all()
    return [line for row in rows if row["state"] == "running" and row["id"] in served
            for line in lines_of(served[str(row["id"])], row["provider"] == "local")]  # fmt: skip
