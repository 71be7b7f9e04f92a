"""The recovery controller's `recovered` notification: posted from this machine once the job
runs again on fresh hosts (the lost host's agent cannot tell anyone), to the job's webhooks
(`notify:` of its spec and of the user config, URLs from the environment the controller
inherited from `submit`), with what the restart said and the job's cost so far."""

from __future__ import annotations

from typing import Any

from launcher.errors import GpujobError
from launcher.say import say


def spent_so_far(job_id: str) -> float:
    """What the job's hosts cost it until now: read before its lost hosts leave its record."""
    from launcher.state.costs import job_dollars

    return job_dollars(job_id) or 0.0


def tell_recovered(job_id: str, request: dict[str, Any], line: str, spent: float) -> None:
    """Posted and waited for (retried as the agent's posts are); a spec that no longer loads
    or a variable now unset is one line of the controller's log, never its end."""
    from launcher.jobs.notify import notify_hooks, tell
    from launcher.spec.load import load_requested

    try:
        hooks = notify_hooks(load_requested(request))
    except GpujobError as error:
        say(f"notify: recovered not sent: {error.one_line()}")
        return
    if hooks:
        tell(hooks, job_id, "recovered", line, f"${spent:.2f} (the hosts it ran on so far)")
