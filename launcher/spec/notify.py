"""`notify:` in a job spec or the user config: webhooks told of the job's end and recovery.

`webhook_env` names a variable of the submitting user's environment holding the URL (a
secret: carried to the host on the start's stdin, never in a file of the spec, a command
line or a log). The events are the agent's end states and the recovery controller's restart
(agent/notify.py sends them). `on:` is YAML 1.1's `true`; it is read as the key it looks like.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from launcher.agent.notify import EVENTS
from launcher.spec.limits import StrictModel
from launcher.spec.remote import ENV_NAME

DEFAULT_EVENTS = ("failed", "timed_out", "recovered", "succeeded")


class NotifySpec(StrictModel):
    webhook_env: str = Field(
        description="Variable of your environment holding the webhook's URL (Slack, Discord, "
        "any JSON endpoint); its value is a secret and never written anywhere."
    )
    on: list[str] = Field(
        default_factory=lambda: list(DEFAULT_EVENTS),
        description=f"Events posted, one POST each: {', '.join(EVENTS)}.",
    )

    @model_validator(mode="before")
    @classmethod
    def _read(cls, value: Any) -> Any:
        """`on:` as YAML 1.1 reads it (`True`) is `on`; a `webhook_env` that is no variable
        name (a URL pasted in) is refused here, on the whole entry, so that the refusal does
        not quote the value: it may be the secret itself."""
        if not isinstance(value, dict):
            return value
        value = {("on" if key is True else key): item for key, item in value.items()}
        name = value.get("webhook_env")
        if isinstance(name, str) and not ENV_NAME.match(name):
            raise ValueError("webhook_env is not a variable name (its value is not shown: it "
                             "may be the URL); name the variable that holds the URL, e.g. "
                             "SLACK_URL, and export it")  # fmt: skip
        return value

    @field_validator("on")
    @classmethod
    def _known_events(cls, value: list[str]) -> list[str]:
        for event in value:
            if event not in EVENTS:
                raise ValueError(f"`{event}` is not an event; use {', '.join(EVENTS)}")
        if not value:
            raise ValueError(f"name at least one event: {', '.join(EVENTS)}")
        return sorted(set(value), key=EVENTS.index)
