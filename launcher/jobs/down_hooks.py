"""`down`'s lifecycle hooks: before the hosts go, each running job's `down` hooks (SkyPilot's
`config.hooks` with `events: [down]`) are run by node 0's agent over the job's connection,
bounded on the host by `timeout`, so that a hook that hangs or a host that stops answering
never keeps `down` from terminating what it rents. Their output is in the job's log; the
cancel that follows runs no stop hook (the host is going down, not the job stopping).
"""

from __future__ import annotations

from launcher.agent import agent_argv
from launcher.errors import GpujobError
from launcher.say import say
from launcher.state.db import JobRecord
from launcher.targets.base import target_for

DOWN_HOOKS_BOUND_S = 3600
"""All of a job's down hooks together (each also has its own timeout, SkyPilot's 3600 s)."""


def down_hooks_argv(agent_python: str, node_dir: str) -> list[str]:
    bound = ["timeout", "-k", "10", str(DOWN_HOOKS_BOUND_S)]
    return bound + agent_argv(agent_python, node_dir, "hooks", "down")


def run_down_hooks(job: JobRecord) -> None:
    """Node 0's `down` hooks, if the job has any (the agent reads them from its job.json);
    a failure is a line, and the host goes anyway."""
    try:
        node = target_for(job).nodes(job)[0]
        result = node.connection.run(down_hooks_argv(node.agent_python, node.node_dir))
    except (GpujobError, OSError, EOFError, IndexError) as err:
        say(f"job {job.id}: its down hooks could not run ({err}); the host goes anyway")
        return
    if result.exit_code in (124, 137):
        say(f"job {job.id}: its down hooks ran past {DOWN_HOOKS_BOUND_S} s and were stopped; "
            "the host goes anyway")  # fmt: skip
    elif not result.ok:
        say(f"job {job.id}: a down hook failed (its log says how); the host goes anyway")
