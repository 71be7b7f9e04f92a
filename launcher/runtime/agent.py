"""The agent's protocol as the client speaks it: the command lines that ask a node's agent
to start, report, cancel or read, spelled in this one place.

The agent (`launcher/agent/agent.py`, shipped as `<job dir>/gpujob-agent.py`) answers
`start|status|cancel|read NODE_DIR ...`; its status is JSON with a `state` from
`launcher.agent.states`.
"""

from __future__ import annotations

from typing import TypedDict

from launcher.agent import AGENT_FILE, agent_argv, agent_path
from launcher.agent.states import TERMINAL

__all__ = ["AGENT_FILE", "TERMINAL", "NodeStatus", "agent_argv", "agent_path"]


class NodeStatus(TypedDict, total=False):
    """A node's status as its agent writes it (`status.json`, `agent.py status`), with what
    the client lays over it (`last_line`; SLURM's `slurm` line; `reason` while queued).
    Which Python runs the agent is the target's trait (`Traits.agent_python`)."""

    state: str | None
    exit_code: int | None
    reason: str | None
    last_line: str | None
    started_at: float | None
    ended_at: float | None
    cancel_asked_at: float
    """When a cancel asked the node to stop (its marker's time; jobs/keep.py)."""
    requested_at: float
    stopped_reason: str | None
    disk: dict[str, object] | None
    gpu_idle: dict[str, object] | None
    metrics: dict[str, object]
    supervisor_pid: int | None
    pid: int | None
    container: str | None
    slurm: str
    never_started: bool
    had_ended: bool
