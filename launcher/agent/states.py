"""A job's states, as its agents record them and every part of gpujob reads them.

Standard library only, shipped beside the agent (which imports it as a sibling module).
"""

from __future__ import annotations

STARTING, RUNNING = "starting", "running"
SUCCEEDED, FAILED, CANCELLED, LOST = "succeeded", "failed", "cancelled", "lost"
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, LOST})
"""A node in one of these has ended and will not change again."""
WORST_FIRST = (LOST, FAILED, CANCELLED, RUNNING, STARTING, SUCCEEDED)
"""A job's state is its nodes' worst: one lost node makes the job lost."""
