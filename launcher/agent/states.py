"""A job's states, as its agents record them and every part of gpujob reads them.

Standard library only, shipped beside the agent (which imports it as a sibling module).
"""

from __future__ import annotations

STARTING, RUNNING = "starting", "running"
SUCCEEDED, FAILED, CANCELLED, LOST = "succeeded", "failed", "cancelled", "lost"
TIMED_OUT = "timed out"
"""Stopped by its agent at the job's `max_duration` (limits.py); exits 124, as GNU `timeout`."""
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, LOST, TIMED_OUT})
"""A node in one of these has ended and will not change again."""
WORST_FIRST = (LOST, TIMED_OUT, FAILED, CANCELLED, RUNNING, STARTING, SUCCEEDED)
"""A job's state is its nodes' worst: one lost node makes the job lost. A timed-out node
ranks above a failed one: when one node's limit stops its ranks, the others' collectives
fail for want of their peers, and the limit is the cause."""
