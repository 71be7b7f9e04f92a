"""A job's states, one enum: the strings its agents write stay as they are on disk
(`launcher.agent.states`, the agent's own stdlib copy), and the ones only the client knows
are added: `pending` (queued on a cluster), `unreachable` (a host did not answer; shown,
never recorded) and `recovering` (recorded while the controller replaces the job's hosts).
The rules over them (a job's state from its nodes', its exit code) are `launcher.jobs.state`.
"""

from __future__ import annotations

from enum import StrEnum

from launcher.agent import states as agent


class JobState(StrEnum):
    PENDING = "pending"
    STARTING = agent.STARTING
    RUNNING = agent.RUNNING
    SUCCEEDED = agent.SUCCEEDED
    FAILED = agent.FAILED
    CANCELLED = agent.CANCELLED
    LOST = agent.LOST
    TIMED_OUT = agent.TIMED_OUT
    UNREACHABLE = "unreachable"
    RECOVERING = "recovering"
    UNKNOWN = "unknown"
    """A node with no status file (yet), or a cluster's node its agent has not answered for."""

    @property
    def is_terminal(self) -> bool:
        return self.value in agent.TERMINAL


TERMINAL = frozenset(JobState(state) for state in agent.TERMINAL)
"""A node or job in one of these has ended and will not change again."""
NODE_FAILURES = frozenset({JobState.FAILED, JobState.LOST})
"""A node's end that fails the job (a cancel or a time limit is everyone's, not one node's)."""
WORST_FIRST = tuple(JobState(state) for state in agent.WORST_FIRST)
"""A job's state is its nodes' worst: one lost node makes the job lost (agent/states.py)."""


def is_terminal(state: str | None) -> bool:
    return state in agent.TERMINAL
