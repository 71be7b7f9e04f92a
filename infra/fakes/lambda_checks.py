"""Request checks of the Lambda fake: body, path ids, auth header, firewall rules, key pairs.

Messages are the fake's own words, except the malformed-id text, which is the one a client's
captured fixture shows (§3); clients must switch on `code`, never on `message`.
"""

from __future__ import annotations

import base64
import contextlib
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from infra.fakes.lambda_state import fail
from infra.fakes.server import ApiError, Reply, Request, json_reply

HEX32 = re.compile(r"^[0-9a-f]{32}$")
FIREWALL_PROTOCOLS = ("tcp", "udp", "icmp", "all")


def data(payload: Any) -> Reply:
    return json_reply(200, {"data": payload})


def bad(message: str) -> ApiError:
    return fail("global/invalid-parameters", message)


def body_of(request: Request) -> dict[str, Any]:
    try:
        body = request.json()
    except ValueError as error:
        raise bad(f"Request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise bad("Request body must be a JSON object.")
    return body


def check_id(value: str, where: str = "id") -> str:
    if not HEX32.match(value):
        raise bad(f"Error in request path at '{where}': Input should be a valid UUID, invalid "
                  f"length: expected length 32 for simple format, found {len(value)}")  # fmt: skip
    return value


def keys_from(headers: dict[str, str]) -> list[str]:
    """Candidate keys: Bearer, or Basic with base64("key:") or, per the scheme text, the key."""
    scheme, _, value = headers.get("authorization", "").strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return [value]
    if scheme.lower() == "basic":
        candidates = [value]
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            candidates.append(base64.b64decode(value, validate=True).decode().split(":", 1)[0])
        return candidates
    return []


def check_firewall_rule(rule: Any) -> None:
    if not isinstance(rule, dict) or rule.get("protocol") not in FIREWALL_PROTOCOLS:
        raise bad(f"Invalid firewall rule: {rule!r}.")
    ports = rule.get("port_range")
    valid_ports = (isinstance(ports, list) and len(ports) == 2 and ports[0] <= ports[1]
                   and all(isinstance(p, int) and 1 <= p <= 65535 for p in ports))  # fmt: skip
    if rule["protocol"] != "icmp" and not valid_ports:
        raise bad(f"port_range must be [min, max] for {rule['protocol']}.")
    if not re.match(r"^\d+\.\d+\.\d+\.\d+(/\d+)?$", str(rule.get("source_network", ""))):
        raise bad("source_network must be an IPv4 CIDR.")
    if len(str(rule.get("description", ""))) > 128:
        raise bad("description is longer than 128 characters.")


def generate_key_pair(name: str) -> tuple[str, str]:
    """A fresh RSA pair, the private half in PEM as Lambda returns it (shown once)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "",
                        "-C", name, "-f", str(path)], check=True)  # fmt: skip
        return Path(f"{path}.pub").read_text().strip(), path.read_text()
