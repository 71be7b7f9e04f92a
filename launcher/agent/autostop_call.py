"""The call a host makes to end itself, for the autostop watcher (autostop.py, shipped
beside it). Standard library only.

The key is read at the moment of the call, from its 0600 file (Lambda: the user's key, which
`up --autostop-key-on-host` put there) or from the instance's own environment (Vast's
`CONTAINER_API_KEY`); it goes into the Authorization header and nowhere else.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

CALL_TIMEOUT_S = 30.0
VAST_KEY, VAST_ID = "CONTAINER_API_KEY", "CONTAINER_ID"


class CallFailed(Exception):
    """The cloud did not take the call; the message is its answer (never the key)."""


def _environ_file(path: str, name: str) -> str | None:
    """`name` from a NUL- or newline-separated environment file (/proc/1/environ, or
    /etc/environment, where gpujob's Vast onstart copies the container's variables)."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    for line in raw.replace(b"\0", b"\n").decode(errors="replace").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.removeprefix("export ").strip() == name:
            return value.strip().strip("'\"") or None
    return None


def vast_variable(name: str) -> str | None:
    """A variable Vast puts in the container's environment, which an SSH session (and so
    this watcher) does not inherit: ours, PID 1's, or /etc/environment."""
    return (os.environ.get(name) or _environ_file("/proc/1/environ", name)
            or _environ_file("/etc/environment", name))  # fmt: skip


def api_key(config: dict[str, Any]) -> str:
    if config.get("key_file"):
        try:
            key = Path(config["key_file"]).read_text().strip()
        except OSError as err:
            raise CallFailed(f"cannot read {config['key_file']}: {err.strerror}") from None
    else:
        key = vast_variable(VAST_KEY) or ""
    if not key:
        raise CallFailed(f"no API key ({config.get('key_file') or VAST_KEY} is empty or absent)")
    return key


def request_for(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(method, url, body) of the call that ends this instance."""
    url = str(config["api_url"]).rstrip("/")
    instance = str(config.get("instance_id") or vast_variable(VAST_ID) or "")
    if config["provider"] == "lambda":
        return "POST", f"{url}/instance-operations/terminate", {"instance_ids": [instance]}
    if config["action"] == "stop":
        return "PUT", f"{url}/instances/{instance}/", {"state": "stopped"}
    return "DELETE", f"{url}/instances/{instance}/", {}


def call_cloud(config: dict[str, Any]) -> str:
    """Send the call; what the cloud said when it took it. An instance the cloud no longer
    knows is already gone: that is success too."""
    method, url, body = request_for(config)
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method=method,
        headers={"Authorization": f"Bearer {api_key(config)}",
                 "Content-Type": "application/json", "User-Agent": "gpujob-autostop/1"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as reply:
            text = reply.read().decode(errors="replace")
            status = reply.status
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        if error.code == 404 or "no_such_instance" in text or "does-not-exist" in text:
            return f"{method} answered {error.code}: the instance is already gone"
        raise CallFailed(f"{method} {url} answered {error.code}: {text[:300]}") from None
    except Exception as error:  # no answer, a cut one, a bad URL: try again later
        raise CallFailed(f"{method} {url}: {type(error).__name__}: {error}") from None
    try:
        answer = json.loads(text or "{}")
    except ValueError:
        answer = {}
    if isinstance(answer, dict) and answer.get("success") is False:
        raise CallFailed(f"{method} {url} answered {status}: {text[:300]}")
    return f"{method} {url} answered {status}"
