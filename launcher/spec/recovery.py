"""`recovery:` in a job spec: restart the job on fresh hosts when its hosts are lost.

The events follow dstack's `retry.on_events` and SkyPilot's split (recovery.md §0): the
infrastructure's (`host_lost`, `preempted`) are retried by default; a program's own failure
(`node_failure`, a nonzero exit) only when listed, because restarting a bug costs money and
fixes nothing. The key is dstack's `on_events` (a bare `on:` is `true` to YAML 1.1).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from launcher.spec.limits import Seconds, StrictModel

Event = Literal["host_lost", "preempted", "node_failure"]
EVENTS: tuple[str, ...] = ("host_lost", "preempted", "node_failure")
DEFAULT_EVENTS: tuple[str, ...] = ("host_lost", "preempted")


class RecoverySpec(StrictModel):
    max_restarts: int = Field(
        default=3, ge=0, le=100, description="Restarts on fresh hosts before the job stops."
    )
    on_events: list[Event] = Field(
        default_factory=lambda: list(DEFAULT_EVENTS),
        description="Which events restart the job: host_lost, preempted, node_failure (a "
        "nonzero exit, only when listed).",
    )
    unreachable_after: Seconds = Field(
        default=120.0,
        description="How long a host may stay unreachable over SSH before it counts as lost "
        "(`2m`, seconds).",
    )

    @field_validator("on_events")
    @classmethod
    def _some_events(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one event: host_lost, preempted, node_failure")
        return sorted(set(value), key=EVENTS.index)
