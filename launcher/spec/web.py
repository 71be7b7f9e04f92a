"""What a job serves on its head node: `ports:` (SkyPilot's `resources.ports`: 8080,
"8000-8010", or a list of both) and `tensorboard:` (the folder `gpujob tb` serves).

A port is reached from this machine over the job's own SSH connection (by `submit` while it
follows the job, or `gpujob port-forward JOB`), so a server need only listen on the node's
loopback; only Vast also publishes them (clouds.vast_ports), where nothing else reaches a
container. The ports are recorded with the job so that
`port-forward` with no PORT forwards all of them and `submit`/`status` say how to reach them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

from launcher.spec.limits import StrictModel

MAX_PORTS = 64
"""More than this in one job is a typo'd range (`8000-9000`), not ports to forward."""


def port_number(text: str, what: str = "port") -> int:
    """One TCP port from its text; ValueError in the user's words."""
    text = text.strip()
    if not text.isdigit():
        raise ValueError(f"{what} {text!r} is not a number")
    number = int(text)
    if not 1 <= number <= 65535:
        raise ValueError(f"{what} {number} is not a TCP port (1 to 65535)")
    return number


def expand_ports(value: Any) -> list[int]:
    """SkyPilot's forms, as it reads them: an int, "N", "A-B" (both included), or a list of
    those; sorted, each once."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    ports: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise ValueError(f'{item!r} is not a port: write 8080, "8000-8010" or a list')
        first, dash, last = str(item).partition("-")
        low = port_number(first)
        high = port_number(last) if dash else low
        if high < low:
            raise ValueError(f"range {item!r} ends before it starts")
        ports.update(range(low, high + 1))
    if len(ports) > MAX_PORTS:
        raise ValueError(f"{len(ports)} ports: at most {MAX_PORTS} are forwarded")
    return sorted(ports)


ONE = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 65535},
                 {"type": "string", "pattern": r"^\s*[0-9]+\s*(-\s*[0-9]+\s*)?$"}]}  # fmt: skip
Ports = Annotated[
    list[int],
    BeforeValidator(expand_ports),
    WithJsonSchema({"anyOf": [*ONE["anyOf"], {"type": "array", "items": ONE}]}),
]
"""As written: 8080, "8000-8010", or a list of both; as read: the sorted ports."""


class TensorBoardSpec(StrictModel):
    logdir: str = Field(
        default=".",
        description="The folder of the event files, relative to the job's workdir on the head "
        "node (or absolute): what `gpujob tb JOB` serves.",
    )
