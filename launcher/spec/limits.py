"""How long a job or a host may run, and what an idle one costs: durations as users write
them (`30m`, `2h`), the job's GPU-idle policy and the host's autostop."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from launcher.agent.limits import show_duration as show_duration  # the agent's, one rule


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


DURATION = re.compile(r"^(?P<number>[0-9]+(\.[0-9]+)?)\s*(?P<unit>s|m|h|d)?$")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> float:
    """Seconds from `90`, `90s`, `30m`, `1.5h` or `2d` (a bare number is seconds, as in
    dstack's `max_duration`); the CLI's `--autostop 30m` reads the same forms."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or text like `30m`, `2h`, `1d`")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = DURATION.match(str(value).strip())
        if not match:
            raise ValueError("a duration is a number of seconds or text like `30m`, `2h`, `1d`")
        seconds = float(match.group("number")) * DURATION_UNITS[match.group("unit") or "s"]
    if seconds <= 0:
        raise ValueError("a duration must be above zero")
    return seconds


Seconds = Annotated[
    float, BeforeValidator(parse_duration), WithJsonSchema({"type": ["string", "number"]})
]
"""A duration written as `30m`, `2h`, `1d` or seconds, held as seconds."""


class IdleGpuPolicy(StrictModel):
    """dstack's `utilization_policy`: GPUs below `below_percent` (every GPU of the host, as
    `nvidia-smi` reports them) for `minutes` are warned about in the log and `status`, or,
    with `action: stop`, the job is stopped (grace, last checkpoint synced)."""

    below_percent: float = Field(default=5, ge=0, le=100)
    minutes: float = Field(gt=0, description="How long under the threshold before acting.")
    action: Literal["warn", "stop"] = "warn"


class AutostopSpec(StrictModel):
    """SkyPilot's `autostop`: a host with no running gpujob job and no SSH session for
    `idle_minutes` ships its jobs' logs and checkpoints and ends itself, from the host."""

    idle_minutes: float = Field(gt=0)
    down: bool = Field(
        default=True,
        description="Terminate (true) or stop where the provider can (Vast); Lambda terminates.",
    )
