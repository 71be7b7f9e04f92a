"""A job's `ports:` published by Vast: asked at creation, read back from the instance.

Vast opens only the ports an instance asks for when it is created ("only ports requested at
creation get mapped", shared/reference/vast-api.md §7.6): each is a docker option given as a
key of the create request's `env`, `"-p 8000:8000": "1"` (vast-cli's `parse_env`, Vast's
docs `api-reference/creating-instances-with-api`; SkyPilot asks its ports the same way,
reference §7.4). Vast maps each to a port of the machine's public address, usually another
number (docs `guides/instances/connect/networking`); the mapping is in show-instance's
`ports`, Docker's shape: `{"8000/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41234"}]}`, next
to `public_ipaddr` (reference §4.4), once the instance runs. So the public URL of port P is
`http://PUBLIC_IPADDR:HOSTPORT/`, read from the instance, never assumed to be P.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_PUBLISHED = 63
"""Vast opens at most 64 ports per instance (reference §7.1); one is SSH's (22)."""


class VastPorts:
    published: tuple[int, ...] = ()

    def publish_ports(self, ports: Iterable[int]) -> None:
        """The instances launched from now on publish these ports (a job's `ports:`)."""
        self.published = tuple(sorted(set(ports)))[:MAX_PUBLISHED]

    def port_env(self) -> dict[str, str]:
        """The create request's `env` entries that ask Vast to publish the ports."""
        return {f"-p {port}:{port}": "1" for port in self.published}


def public_ports(raw: dict[str, Any]) -> dict[int, str]:
    """TCP port -> `public address:host port` from a running instance's `ports` mapping
    (SSH's own 22 left out); {} where Vast maps none or says no public address. Vast's
    strings may carry stray whitespace (reference §4.4)."""
    ports, address = raw.get("ports"), str(raw.get("public_ipaddr") or "").strip()
    if not isinstance(ports, dict) or not address:
        return {}
    found: dict[int, str] = {}
    for inner, bound in ports.items():
        number, _, proto = str(inner).partition("/")
        if proto not in ("", "tcp") or not number.isdigit() or number == "22":
            continue
        try:
            host_port = int(str(bound[0]["HostPort"]).strip())
        except (IndexError, KeyError, TypeError, ValueError):
            continue  # a mapping Vast gave no usable port for: not published
        found[int(number)] = f"{address}:{host_port}"
    return found
