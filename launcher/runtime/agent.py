"""The agent's protocol as the client speaks it: the command lines that ask a node's agent
to start, report, cancel or read, spelled in this one place.

The agent (`launcher/agent/agent.py`, shipped as `<job dir>/gpujob-agent.py`) answers
`start|status|cancel|read NODE_DIR ...`; its status is JSON with a `state` from
`launcher.agent.states`.
"""

from __future__ import annotations

import sys
from pathlib import PurePosixPath

from launcher.agent import AGENT_FILE
from launcher.agent.states import TERMINAL

__all__ = ["AGENT_FILE", "TERMINAL", "agent_argv", "agent_path", "python_for"]


def agent_path(node_dir: str) -> str:
    """The agent beside a node's folder, in its job's folder."""
    return str(PurePosixPath(node_dir).parent / AGENT_FILE)


def python_for(provider: str) -> str:
    """The agent runs with this Python locally, with the host's python3 elsewhere."""
    return sys.executable if provider == "local" else "python3"


def agent_argv(python: str, node_dir: str, command: str, *args: str) -> list[str]:
    return [python, agent_path(node_dir), command, node_dir, *args]
