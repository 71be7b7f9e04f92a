"""The agent's protocol as the client speaks it: the command lines that ask a node's agent
to start, report, cancel or read, spelled in this one place.

The agent (`launcher/agent/agent.py`, shipped as `<job dir>/gpujob-agent.py`) answers
`start|status|cancel|read NODE_DIR ...`; its status is JSON with a `state` from
`launcher.agent.states`.
"""

from __future__ import annotations

import sys

from launcher.agent import AGENT_FILE, agent_argv, agent_path
from launcher.agent.states import TERMINAL

__all__ = ["AGENT_FILE", "TERMINAL", "agent_argv", "agent_path", "python_for"]


def python_for(provider: str) -> str:
    """The agent runs with this Python locally, with the host's python3 elsewhere."""
    return sys.executable if provider == "local" else "python3"
