"""`gpujob replay`: parse, call `commands.replay`, exit with the command's own code."""

from __future__ import annotations

import sys

import click


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("job")
@click.option("--step", type=int, help="The captured step (default: the latest).")
@click.option("--rank", type=int, help="The captured rank (default: the lowest of that step).")
@click.option("--on", "on", metavar="HOST|local",
              help="Where the step runs again: this machine (default) or a host.")  # fmt: skip
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="A variable for CMD, over the job's envs (repeatable).")  # fmt: skip
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def replay(job: str, step: int | None, rank: int | None, on: str | None,
           sets: tuple[str, ...], command: tuple[str, ...]) -> None:  # fmt: skip
    """Run a captured step of JOB again on one GPU: CMD gets GPUJOB_REPLAY_INPUT (the step's
    inputs and RNG states, saved by gpujob_capture) and GPUJOB_REPLAY_CHECKPOINT (the
    checkpoint saved before it).

    \b
    gpujob replay JOB -- python replay.py
    gpujob replay JOB --step 7 --rank 1 --set FAST_PATH=0 -- python replay.py
    """
    from launcher.commands.replay import ReplayRequest
    from launcher.commands.replay import replay as run_replay

    request = ReplayRequest(job=job, command=command, step=step, rank=rank, on=on, sets=sets)
    sys.exit(run_replay(request))
