"""`metrics:` in a job spec: where the agent finds the job's own figures besides
`$GPUJOB_METRICS` (always read): a pattern over the log's lines, TensorBoard event files.
The agent records them with the GPUs' use beside the log (launcher/agent/metrics.py);
`gpujob metrics` shows them."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from launcher.spec.limits import Seconds, StrictModel


class MetricsSpec(StrictModel):
    from_log: str | None = Field(
        default=None,
        description="A regular expression over the job's log lines; each named group that "
        r"matches a number is a figure, `step` the step: `step (?P<step>\d+) .*loss "
        r"(?P<loss>[0-9.]+)`.",
    )
    tensorboard: str | None = Field(
        default=None,
        description="A folder the job writes TensorBoard event files to, relative to its "
        "workdir (or absolute): their scalars are recorded by step, by tag.",
    )
    every: Seconds = Field(
        default=5.0, description="How often the agent records (`5s`, seconds); at least 1 s."
    )

    @field_validator("from_log")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            compiled = re.compile(value)
        except re.error as err:
            raise ValueError(f"not a valid regular expression: {err}") from None
        if not compiled.groupindex:
            raise ValueError(r"name the figures with groups: `(?P<loss>[0-9.]+)`")
        return value

    @field_validator("every")
    @classmethod
    def _not_too_often(cls, value: float) -> float:
        if value < 1:
            raise ValueError("record every 1 s or less often")
        return value

    def agent_config(self) -> dict[str, object]:
        """job.json's `metrics`, as the agent reads it."""
        return {"from_log": self.from_log, "tensorboard": self.tensorboard,
                "every_s": self.every}  # fmt: skip
